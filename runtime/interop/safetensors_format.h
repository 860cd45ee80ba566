// The bytes of a safetensors file (huggingface/safetensors' format, which PyTorch, JAX/flax and
// Hugging Face read and write):
//
//   u64 N (little-endian)   N bytes of JSON   the data buffer
//
// The JSON maps each tensor's name to {"dtype": "F32", "shape": [...], "data_offsets": [begin,
// end]} (byte offsets into the data buffer), plus an optional "__metadata__" of strings. The
// elements are little-endian, C order. The tensors must cover the buffer exactly, in order of
// offsets, with no gap and no overlap. This file reads and writes the bytes; names and layouts
// are safetensors.h's.
#pragma once

#include <map>
#include <source_location>
#include <string>
#include <string_view>

#include "runtime/host_tensor.h"

namespace towerjit {

struct SafetensorsFile {
  std::map<std::string, HostTensor> tensors;         // f32 or i32, by the file's names
  std::map<std::string, std::string> metadata = {};  // "__metadata__"
};

// The file's bytes: F32 and I32 tensors, in name order, the header padded with spaces to a
// multiple of 8 bytes (as the reference writer does, so the data is aligned). Errors
// (towerjit::Error at `loc`): a tensor whose data does not fill its shape, an empty name or
// "__metadata__" as a tensor's name.
std::string encode_safetensors(const SafetensorsFile& file, std::source_location loc);

// Parses a file's bytes; `file` names it in errors. Element types: F32 as f32; F16, BF16 and
// F64 converted to f32 (rounded to nearest); I32 as i32; I64 to i32, range-checked; BOOL and U8
// to i32. Errors: a file shorter than its header length says, a header over 100 MB or not the
// JSON described above (naming the tensor and the field), an unknown dtype, a shape whose
// element count overflows, data offsets that disagree with the shape and dtype, run past the
// end of the file or leave a gap or an overlap in the buffer — all checked before any tensor
// is allocated.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& file, std::source_location loc);

}  // namespace towerjit
