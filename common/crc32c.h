// crc32c.h: CRC-32C (Castagnoli), the checksum of our checkpoint and training-state
// files. Table-driven (slicing by 8), so it needs no CPU feature and gives the same
// value on every machine; ~2 GB/s, a few seconds for the largest GPT-2 checkpoint,
// small beside writing it.
//   crc = crc32c_update(0, a, n1); crc = crc32c_update(crc, b, n2);  ==  crc32c of a||b
#ifndef COMMON_CRC32C_H
#define COMMON_CRC32C_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t g_crc32c_table[8][256];
static int g_crc32c_ready = 0;

static inline void crc32c_init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
        g_crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            g_crc32c_table[t][i] = (g_crc32c_table[t - 1][i] >> 8) ^ g_crc32c_table[0][g_crc32c_table[t - 1][i] & 0xff];
    g_crc32c_ready = 1;
}

// Continues crc (0 to start) over n bytes of data.
static inline uint32_t crc32c_update(uint32_t crc, const void *data, size_t n) {
    if (!g_crc32c_ready) crc32c_init_tables();
    const uint8_t *p = (const uint8_t *)data;
    uint32_t c = ~crc;
    for (; n && ((uintptr_t)p & 7); n--) c = (c >> 8) ^ g_crc32c_table[0][(c ^ *p++) & 0xff];
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = g_crc32c_table[7][lo & 0xff] ^ g_crc32c_table[6][(lo >> 8) & 0xff] ^
            g_crc32c_table[5][(lo >> 16) & 0xff] ^ g_crc32c_table[4][lo >> 24] ^
            g_crc32c_table[3][hi & 0xff] ^ g_crc32c_table[2][(hi >> 8) & 0xff] ^
            g_crc32c_table[1][(hi >> 16) & 0xff] ^ g_crc32c_table[0][hi >> 24];
    }
    for (; n; n--) c = (c >> 8) ^ g_crc32c_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#endif // COMMON_CRC32C_H
