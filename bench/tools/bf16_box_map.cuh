// The TMA tensor maps through which the stream tools (start_delay.cu, weight_order.cu) read a
// [rows, k] bf16 weight matrix, and the driver's encoder, reached through the runtime: the
// tools, like the library, do not link libcuda.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/// cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion, or null where the driver
/// does not provide it.
inline EncodeTiled encode_tiled_entry() {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
        return nullptr;
    return reinterpret_cast<EncodeTiled>(entry);
}

/// Makes `map` the row-major [rows, k] bf16 matrix at `src`, read in boxes of `box_k` elements
/// of `box_rows` rows, with `swizzle` and `promotion`. Returns the encoder's result.
inline CUresult encode_bf16_matrix(EncodeTiled encode, CUtensorMap* map, void* src, int rows,
                                   int k, cuuint32_t box_k, cuuint32_t box_rows,
                                   CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
    const cuuint32_t box[2] = {box_k, box_rows};
    const cuuint32_t element_strides[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, src, dims, strides, box,
                  element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}
