// loader_thread.h: --loader-threads 1. A thread reads the training split's micro-batches
// ahead of the trainer into a ring of LOADER_RING batches, so a slow disk or network file
// system costs the step nothing as long as a read takes less than a step. The thread
// reads in the loader's own order, so the batches, the rank split and exact resume are
// those of reading in the training loop; dataloader_get_pos gives the position after the
// last batch the trainer took, not the thread's read-ahead. A read that fails (a bad or
// changed shard) stops the run when the trainer takes that batch, with the same message,
// from the main thread: the steps before it run and checkpoint as without the thread.
// Started after any resume (dataloader_set_pos), stopped by dataloader_free.
#ifndef COMMON_LOADER_THREAD_H
#define COMMON_LOADER_THREAD_H
#include "dataloader.h"
#include <pthread.h>

#define LOADER_RING 4

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t filled, emptied;
    int *inputs, *targets;     // LOADER_RING batches of B*T
    DataLoaderPos pos[LOADER_RING];  // the loader's position after each slot's batch
    DataLoaderPos taken;       // after the last batch the trainer took
    int head, count, stop;     // next slot to take, slots filled
    int reading;               // the slot being read
    int failed_slot;           // -1, or the slot whose read failed (the thread has ended)
    char error[1024];          // that read's message
} LoaderThread;

static void *loader_thread_main(void *arg) {
    DataLoader *dl = (DataLoader *)arg;
    LoaderThread *t = (LoaderThread *)dl->bg;
    size_t bt = (size_t)dl->B * dl->T;
    FatalTrap trap;
    g_fatal_trap = &trap;
    if (setjmp(trap.jump)) {  // a read failed: its slot carries the message to the trainer
        pthread_mutex_lock(&t->mu);
        memcpy(t->error, trap.msg, sizeof t->error);
        t->failed_slot = t->reading;
        t->count++;
        pthread_cond_signal(&t->filled);
        pthread_mutex_unlock(&t->mu);
        g_fatal_trap = NULL;
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->count == LOADER_RING && !t->stop) pthread_cond_wait(&t->emptied, &t->mu);
        int stop = t->stop, slot = (t->head + t->count) % LOADER_RING;
        pthread_mutex_unlock(&t->mu);
        if (stop) return NULL;
        // the slot is the thread's until count covers it
        t->reading = slot;
        dataloader_read(dl, t->inputs + slot * bt, t->targets + slot * bt);
        t->pos[slot] = dl_read_pos(dl);
        pthread_mutex_lock(&t->mu);
        t->count++;
        pthread_cond_signal(&t->filled);
        pthread_mutex_unlock(&t->mu);
    }
}

static void loader_thread_next(DataLoader *dl, int *inputs, int *targets) {
    LoaderThread *t = (LoaderThread *)dl->bg;
    size_t bt = (size_t)dl->B * dl->T;
    pthread_mutex_lock(&t->mu);
    while (t->count == 0) pthread_cond_wait(&t->filled, &t->mu);
    int slot = t->head, failed = slot == t->failed_slot;
    pthread_mutex_unlock(&t->mu);
    if (failed) {  // the batch the read was for: stop here, as without the thread
        pthread_join(t->thread, NULL);  // it has ended
        fatal("%s", t->error);
    }
    memcpy(inputs, t->inputs + slot * bt, bt * sizeof(int));
    memcpy(targets, t->targets + slot * bt, bt * sizeof(int));
    pthread_mutex_lock(&t->mu);
    t->taken = t->pos[slot];
    t->head = (t->head + 1) % LOADER_RING;
    t->count--;
    pthread_cond_signal(&t->emptied);
    pthread_mutex_unlock(&t->mu);
}

static DataLoaderPos loader_thread_pos(const DataLoader *dl) {
    LoaderThread *t = (LoaderThread *)dl->bg;
    pthread_mutex_lock(&t->mu);
    DataLoaderPos p = t->taken;
    pthread_mutex_unlock(&t->mu);
    return p;
}

static void loader_thread_stop(DataLoader *dl) {
    LoaderThread *t = (LoaderThread *)dl->bg;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->emptied);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->filled);
    pthread_cond_destroy(&t->emptied);
    free(t->inputs);
    free(t->targets);
    free(t);
    dl->bg = NULL;
}

// Starts reading dl's batches on a thread, from its current position.
static inline void loader_thread_start(DataLoader *dl) {
    if (dl->bg) return;
    LoaderThread *t = (LoaderThread *)xcalloc(1, sizeof(LoaderThread));
    size_t bt = (size_t)dl->B * dl->T;
    t->inputs = (int *)xmalloc(LOADER_RING * bt * sizeof(int));
    t->targets = (int *)xmalloc(LOADER_RING * bt * sizeof(int));
    t->taken = dl_read_pos(dl);
    t->failed_slot = -1;
    if (pthread_mutex_init(&t->mu, NULL) || pthread_cond_init(&t->filled, NULL) ||
        pthread_cond_init(&t->emptied, NULL))
        fatal("cannot create the data loader thread's locks");
    dl->bg_next = loader_thread_next;
    dl->bg_pos = loader_thread_pos;
    dl->bg_stop = loader_thread_stop;
    dl->bg = t;
    int err = pthread_create(&t->thread, NULL, loader_thread_main, dl);
    if (err) fatal("cannot start the data loader thread: %s", strerror(err));
}

#endif  // COMMON_LOADER_THREAD_H
