// Transposes of float matrices: the direct convolutions' changes of layout between NCHW and
// their channels-last blocks (direct_conv.cpp), a few times per image on every pass.
#pragma once

#include <cstdint>

namespace towerjit::cpujit {

// out[j * ld_out + i] = in[i * ld_in + j] for i < rows, j < cols, in 8x8 tiles through AVX2
// registers; the partial tiles at the edges through masked loads and stores (an image row's
// 28 columns had been 24 by tiles and 4 by scalars, a third of the packing's time). The tiles
// stay 8x8 with AVX-512 too: a 16x16 tile takes as many shuffles per float, but 512-bit
// shuffles issue on one port of these cores where 256-bit ones issue on two (measured 1.5x
// slower on Sapphire Rapids). Needs AVX2.
// With `column_bias`, the convolutions' epilogue (conv_epilogue.h) on the way:
// out[j * ld_out + i] = act(in[i * ld_in + j] + column_bias[j]), act the DSL's relu with `relu`,
// else nothing.
void transpose_floats(const float* in, int64_t rows, int64_t cols, int64_t ld_in, float* out, int64_t ld_out,
                      const float* column_bias = nullptr, bool relu = false);

}  // namespace towerjit::cpujit
