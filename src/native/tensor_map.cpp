// Encoding of the native kernels' TMA tensor maps through the driver entry point that the
// runtime resolves, so the library never links libcuda.
#include "native/tensor_map.hpp"

#include <algorithm>

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "error.hpp"
#include "problem.hpp"

namespace moegemm::native {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
    // Resolved once; C++ guarantees the initialization runs once even with concurrent callers.
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* entry = nullptr;
        cudaDriverEntryPointQueryResult found{};
        const cudaError_t err = cudaGetDriverEntryPointByVersion(
            "cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found);
        if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || entry == nullptr) {
            (void)cudaGetLastError();
            return PFN_cuTensorMapEncodeTiled_v12000{nullptr};
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
    }();
    require(fn != nullptr, MOEGEMM_STATUS_NO_DEVICE,
            "the CUDA driver does not provide cuTensorMapEncodeTiled (driver too old?)");
    return fn;
}

}  // namespace

namespace {

CUtensorMapDataType tensor_map_type(moegemm_dtype_t type) {
    switch (type) {
        case MOEGEMM_DTYPE_F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
        case MOEGEMM_DTYPE_BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        case MOEGEMM_DTYPE_E4M3: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // moved, not converted
        case MOEGEMM_DTYPE_F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    }
    fail(MOEGEMM_STATUS_INTERNAL_ERROR, "no tensor map type for dtype {}", static_cast<int>(type));
}

// Encodes a `rank`-dimensional tensor (dims innermost first; strides in bytes of the outer
// dimensions) read in `box` boxes with 128-byte swizzle and zero fill.
CUtensorMap encode(const void* base, moegemm_dtype_t type, cuuint32_t rank,
                   const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                   L2Fill fill) {
    const CUtensorMapDataType data_type = tensor_map_type(type);
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    CUtensorMap map{};
    const CUresult r = encode_tiled()(
        &map, data_type, rank, const_cast<void*>(base), dims, strides, box, element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        fill == L2Fill::Widened ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
                                : CU_TENSOR_MAP_L2_PROMOTION_NONE,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    require(r == CUDA_SUCCESS, MOEGEMM_STATUS_INTERNAL_ERROR,
            "cuTensorMapEncodeTiled failed (CUresult {}) for a rank-{} tensor at {}",
            static_cast<int>(r), rank, base);
    return map;
}

}  // namespace

CUtensorMap make_kmajor_tensor_map(const void* base, moegemm_dtype_t type, int64_t rows,
                                   int64_t k, int box_rows, int box_k, L2Fill fill) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
    // Bytes, a multiple of 16 (validated).
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * dtype_bytes(type)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_k), static_cast<cuuint32_t>(box_rows)};
    return encode(base, type, 2, dims, strides, box, fill);
}

CUtensorMap make_nmajor_weights_tensor_map(const void* base, moegemm_dtype_t type,
                                           int64_t experts, int64_t k, int64_t n, L2Fill fill) {
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(n), static_cast<cuuint64_t>(k),
                                static_cast<cuuint64_t>(experts)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(n) * 2,
                                   static_cast<cuuint64_t>(n) * static_cast<cuuint64_t>(k) * 2};
    const cuuint32_t box[3] = {64, 64, 1};
    return encode(base, type, 3, dims, strides, box, fill);
}

GateUpMapShape gate_up_map_shape(int64_t experts, int64_t n, int64_t k, std::size_t element_bytes,
                                 int box_rows, int box_k, bool interleaved, int group) {
    // Row r of expert e's [n, k] matrix as (pair i, kind g): halves put r = g * n/2 + i,
    // interleaved r = 2 i + g.
    require(n > 0 && n % 16 == 0, MOEGEMM_STATUS_INTERNAL_ERROR,
            "gate/up weights need n a multiple of 16, got {}", n);
    require(group >= 8 && box_rows % (2 * group) == 0 && group <= 256,
            MOEGEMM_STATUS_INTERNAL_ERROR, "gate/up groups of {} pairs in boxes of {} rows",
            group, box_rows);
    const auto row = static_cast<cuuint64_t>(k) * element_bytes;
    const auto pairs = static_cast<cuuint64_t>(n) / 2;
    const cuuint64_t pair_stride = interleaved ? 2 * row : row;
    const cuuint64_t kind_stride = interleaved ? row : pairs * row;
    const cuuint64_t expert_stride = static_cast<cuuint64_t>(n) * row;
    GateUpMapShape shape{};
    if (group == 8) {
        // Five dimensions, k innermost: (k, i_lo, g, i_hi, e) with i = 8 i_hi + i_lo, so that
        // one box of (8, 2, box_rows / 16) rows lands as groups of 8 rows of the first kind
        // followed by the same 8 of the second. (Groups of 8 whole pairs: n / 2 is a multiple
        // of 8, so no group reads rows past the expert's.)
        shape.rank = 5;
        const cuuint64_t dims[5] = {static_cast<cuuint64_t>(k), 8, 2, pairs / 8,
                                    static_cast<cuuint64_t>(experts)};
        const cuuint64_t strides[4] = {pair_stride, kind_stride, 8 * pair_stride, expert_stride};
        const cuuint32_t box[5] = {static_cast<cuuint32_t>(box_k), 8, 2,
                                   static_cast<cuuint32_t>(box_rows / 16), 1};
        std::copy(dims, dims + 5, shape.dims);
        std::copy(strides, strides + 4, shape.strides);
        std::copy(box, box + 5, shape.box);
    } else {
        // Four dimensions (k, i, g, e); a box is `group` pairs of one kind, and a tile's B is
        // box_rows / group of them. Pairs past n / 2 are zero-filled, not the next kind's.
        shape.rank = 4;
        const cuuint64_t dims[4] = {static_cast<cuuint64_t>(k), pairs, 2,
                                    static_cast<cuuint64_t>(experts)};
        const cuuint64_t strides[3] = {pair_stride, kind_stride, expert_stride};
        const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_k),
                                   static_cast<cuuint32_t>(group), 1, 1};
        std::copy(dims, dims + 4, shape.dims);
        std::copy(strides, strides + 3, shape.strides);
        std::copy(box, box + 4, shape.box);
    }
    return shape;
}

CUtensorMap make_gate_up_weights_tensor_map(const void* base, moegemm_dtype_t type,
                                            int64_t experts, int64_t n, int64_t k, int box_rows,
                                            int box_k, bool interleaved, int group, L2Fill fill) {
    const GateUpMapShape shape = gate_up_map_shape(experts, n, k, dtype_bytes(type), box_rows,
                                                   box_k, interleaved, group);
    return encode(base, type, static_cast<cuuint32_t>(shape.rank), shape.dims, shape.strides, shape.box, fill);
}

}  // namespace moegemm::native
