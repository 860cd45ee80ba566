// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), the checksum TFRecord framing uses,
// and the "masked" form TFRecord stores (a CRC of data that holds CRCs is weak, so the stored
// value is rotated and offset).
#pragma once

#include <cstddef>
#include <cstdint>

namespace towerjit::report {

uint32_t crc32c(const void* data, size_t size);

// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
inline uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace towerjit::report
