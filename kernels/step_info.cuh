// kernels/step_info.cuh: the step's scalars on the device (GpuTrainer.info, INFO_SLOTS
// floats), the slots of the GPU trainer's step protocol: written and read by the loss,
// norm, update and collective kernels, so that a step needs one host sync only. The
// trainer (gpu/) owns the array; the slot indices live here, beside the kernels, because
// the norm and AdamW kernels address their slots at these fixed indices and kernels/ does
// not include gpu/.
#pragma once

enum {
    INFO_NORM = 0,      // the gradient norm (unscaled)
    INFO_CLIP = 1,      // the factor that turns the stored gradients into clipped true ones
    INFO_LOSS = 2,      // the step's mean training loss
    INFO_VAL_LOSS = 3,  // the validation loss being accumulated
    INFO_SUMSQ = 4,     // the gradients' sum of squares (this rank's, then all ranks')
    INFO_BARRIER = 5,   // a dummy all-reduced as a barrier between ranks
    INFO_SLOTS = 8
};
