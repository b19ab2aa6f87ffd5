// test_model_alone.cu: gpu/model.cuh compiles on its own, with none of the trainer's settings
// or run machinery (the compile-time checks below; dev/test/test_model_alone.sh also lists
// the headers it pulls in), and its host-side layout (no GPU needed) against sizes computed
// here from GPT-2's definition: the parameter count and offsets in checkpoint order, the
// layer slots of -z 3's parameters and ZeRO-2's gradients, the activations' shape.
#include "dev/test/testutil.h"
#include "gpu/model.cuh"

// the trainer's settings and run machinery must not come with the model
#ifdef FLASH_AUTO
#error "gpu/model.cuh pulls in gpu/settings.cuh"
#endif
#ifdef COMMON_TRAIN_COMMON_H
#error "gpu/model.cuh pulls in common/train_common.h"
#endif

static GPT2Config config(int L, int NH, int C) {
    GPT2Config c = {1024, 50257, 50304, L, NH, C};
    return c;
}

// GPT-2's parameters: wte (Vp x C), wpe (maxT x C), per layer ln1 (2C), qkv (3C^2 + 3C), attproj
// (C^2 + C), ln2 (2C), fc (4C^2 + 4C), fcproj (4C^2 + C), and lnf (2C)
static size_t expected_params(const GPT2Config *c) {
    const size_t C = c->channels;
    return (size_t)c->padded_vocab_size * C + (size_t)c->max_seq_len * C + c->num_layers * (12 * C * C + 13 * C) +
           2 * C;
}

static void test_layout(void) {
    const int shapes[][3] = {{12, 12, 768}, {24, 16, 1024}, {48, 25, 1600}, {2, 2, 64}};
    for (int i = 0; i < 4; i++) {
        GPT2Config c = config(shapes[i][0], shapes[i][1], shapes[i][2]);
        size_t sizes[NUM_PARAM_TENSORS], offsets[NUM_PARAM_TENSORS];
        const size_t n = gpt2_param_layout(&c, sizes, offsets);
        CHECK(n == expected_params(&c), "L=%d C=%d: %zu parameters, expected %zu", c.num_layers, c.channels, n,
              expected_params(&c));
        size_t at = 0;
        for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
            CHECK(offsets[k] == at, "tensor %d at %zu, expected %zu (checkpoint order)", k, offsets[k], at);
            at += sizes[k];
        }
        CHECK(sizes[P_QKVW] == (size_t)c.num_layers * 3 * c.channels * c.channels, "qkv weight %zu", sizes[P_QKVW]);
    }
    GPT2Config d12 = config(12, 12, 768);
    size_t sizes[NUM_PARAM_TENSORS], offsets[NUM_PARAM_TENSORS];
    CHECK(gpt2_param_layout(&d12, sizes, offsets) == 124475904, "GPT-2 124M with Vp = 50304");
}

// slots: wte, wpe and lnf whole, then `slots` copies of one layer's tensors
static void test_slots(void) {
    GPT2Config c = config(12, 12, 768);
    const size_t C = c.channels, whole = (size_t)c.padded_vocab_size * C + (size_t)c.max_seq_len * C + 2 * C;
    const size_t layer = 12 * C * C + 13 * C;
    for (int slots = 0; slots <= MODEL_MAX_SLOTS; slots++) {
        size_t slot_offsets[NUM_PARAM_TENSORS] = {0}, slot_elems = 0;
        const size_t n = slotted_elems(&c, slots, slot_offsets, &slot_elems);
        const size_t want = slots ? whole + slots * layer : expected_params(&c);
        CHECK(n == want, "%d slots: %zu elements, expected %zu", slots, n, want);
        if (slots) {
            CHECK(slot_elems == layer, "a slot holds %zu elements, one layer has %zu", slot_elems, layer);
            CHECK(slot_offsets[P_LN1W] == 0 && slot_offsets[P_QKVW] == 2 * C, "the slot's tensors in checkpoint order");
            CHECK(slot_offsets[P_FCPROJB] == layer - C, "fcproj's bias last in the slot (%zu)", slot_offsets[P_FCPROJB]);
        }
    }
}

static void test_act_shape(void) {
    GPT2Config c = config(12, 12, 768);
    const GPT2Shape sh = {4, 256, 2, 1, 0, 3, 2};
    const ActShape a = gpt2_act_shape(&c, &sh, 132);
    CHECK(a.cfg == &c && a.B == 4 && a.T == 256 && a.recompute == 2 && a.flash == 1 && a.deterministic == 0 &&
              a.num_sms == 132, "the activations' shape is the model's");
}

int main(void) {
    run_case("parameter layout in checkpoint order", test_layout);
    run_case("layer slots of parameters and gradients", test_slots);
    run_case("activations' shape from the model's", test_act_shape);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
