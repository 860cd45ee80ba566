// The bytes of a checkpoint file, format version 1. Every integer is little-endian whatever the
// host (floats are written as their IEEE bits, so NaN payloads and -0.0 survive):
//
//   "TJCK"  u32 version  u64 file size in bytes
//   i64 step  i64 pipeline epoch  i64 pipeline batch
//   u64 count, then count x (string key, string value)                    metadata, by key
//   u64 count, then count x (string name, u32 dtype (0 f32, 1 i32),       variables, by name
//                            u32 rank, rank x i64 dims, elements x 4 bytes)
//   u32 CRC-32 (zlib's) of every byte before it
//
// where a string is a u64 length and its bytes. The file size in the header tells a truncated
// file from a damaged one; the order (std::map's) makes equal checkpoints equal bytes, and the
// reader requires it: keys and names sorted, each once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/checkpoint/checkpoint.h"

namespace towerjit {

inline constexpr char kCheckpointMagic[4] = {'T', 'J', 'C', 'K'};
inline constexpr uint32_t kCheckpointVersion = 1;

// The file's bytes. Errors (towerjit::Error, at `loc`): a variable whose data does not fill
// its shape, or whose shape has a negative dimension.
std::string encode_checkpoint(const Checkpoint& checkpoint, Loc loc);

// Parses a file's bytes; `file` names it in errors: not a towerjit checkpoint, another format
// version, truncated, checksum mismatch, malformed contents (a field past the end, names out
// of order or repeated, a shape larger than the file or than a tensor can hold).
Checkpoint decode_checkpoint(std::string_view bytes, const std::string& file, Loc loc);

}  // namespace towerjit
