// NumPy's .npy format (numpy.lib.format, versions 1 to 3): the magic "\x93NUMPY", a version, a
// header length, a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (N, 784)}
// padded with spaces, then the elements. Read into towerjit's two storage dtypes:
//   f32                    -> f32
//   f64                    -> f32, rounded to nearest (a note on stderr says so, once a file)
//   i32, u8, bool          -> i32, exactly
//   i64                    -> i32, every value checked to fit (an error names the first that does not)
// either byte order ('<', '>', '|'). A Fortran-order array is read correctly: its elements come
// back in C order (row-major), as numpy.ascontiguousarray would give them.
#pragma once

#include <source_location>
#include <string>
#include <string_view>

#include "runtime/host_tensor.h"

namespace towerjit::data {

// The element types an .npy file may hold for towerjit, as its 'descr' names them.
enum class NpyType { f32, f64, i32, i64, u8, boolean };
const char* npy_type_name(NpyType t);  // "float32", "float64", "int32", "int64", "uint8", "bool"

struct NpyArray {
  HostTensor values;       // f32 or i32, C order
  NpyType stored = NpyType::f32;  // what the file held
};

// Parses an .npy file's bytes; `file` names it in errors (towerjit::Error at `loc`): not an
// .npy file (magic), an unsupported version, a header that ends early or is not the dict numpy
// writes, an element type towerjit does not read (naming it, and the astype that converts it),
// a shape whose element count overflows or does not fit a tensor, data shorter or longer than
// the shape says (checked before anything is allocated), an i64 value outside i32's range.
NpyArray parse_npy(std::string_view bytes, const std::string& file, std::source_location loc);

// Reads an .npy file: see above. Errors: parse_npy's, a missing or unreadable file.
HostTensor load_npy(const std::string& path, std::source_location loc = std::source_location::current());
NpyArray load_npy_array(const std::string& path, std::source_location loc = std::source_location::current());

// Writes `t` (f32 as '<f4', i32 as '<i4', C order) as an .npy file numpy.load reads, atomically.
// Errors: a tensor whose data does not fill its shape, a file that cannot be written.
void save_npy(const std::string& path, const HostTensor& t,
              std::source_location loc = std::source_location::current());

// The .npy bytes save_npy writes.
std::string encode_npy(const HostTensor& t, std::source_location loc = std::source_location::current());

}  // namespace towerjit::data
