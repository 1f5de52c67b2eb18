// The decode kernels of the MoE layer (design and semantics: decode_layer.hpp).
//
// Bandwidth. Two blocks of 8 warps run on every SM. A warp keeps up to 8 KB of weight loads in
// flight (FC1: two rows x kRowBatch 16-byte vectors per lane; FC2: kChoiceRows rows x
// kChoiceBatch, with several output columns per item where there are fewer choices than
// rows), up to 128 KB per SM, well above DRAM's latency-bandwidth product per SM. Weights are
// read once, with an evict-first L2 policy, so that FC1's stream does not push out the w2 rows
// FC2's blocks prefetch into L2 (evict-last) as they start, before they wait for FC1.
//
// Compute. At most kTokenRows token rows share a pass over a weight row (more rows of one
// expert, rare at these sizes, take several passes); each weight element costs one conversion
// and one fp32 FMA per row, well below what the SM issues while the bytes arrive.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "error.hpp"
#include "moe/decode_layer.hpp"
#include "moe/launch.hpp"
#include "native/ptx.cuh"
#include "native/sm90/epilogue_ops.cuh"

namespace moegemm::moe {
namespace {

namespace ptx = ::moegemm::native::ptx;
namespace ops = ::moegemm::native;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlocksPerSm = 2;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kMaxChoices = static_cast<int>(kDecodeMaxChoices);
static_assert(kMaxChoices == 32, "routing holds one choice per lane of one warp");
constexpr int kTokenRows = 8;    // FC1: token rows dotted with a weight row pair per pass
constexpr int kRowBatch = 8;     // FC1: 16-byte vectors per lane and row in flight
constexpr int kChoiceRows = 8;   // FC2: choices (each its own w2 row) per pass
constexpr int kChoiceBatch = 2;  // FC2: 16-byte vectors per lane and row in flight

struct DecodeParams {
    const void* x;
    const void* topk_ids;
    const float* topk_weights;
    const uint4* w1;
    const uint4* w2;
    const void* b1;
    const void* b2;
    const float* alpha1;
    const float* alpha2;
    void* out;
    void* h;
    const int32_t* num_tokens_device;
    uint32_t* status_word;
    int64_t num_tokens;
    int64_t max_tokens;
    int64_t hidden;
    int64_t intermediate;
    int64_t l2_prefetch_bytes;  // FC2's prefetch budget over the grid
    int32_t num_experts;
    int32_t first_expert;
    int32_t local_experts;
    int32_t top_k;
    moegemm_activation_t activation;
    moegemm_gate_layout_t gate_layout;
    float activation_alpha;
    float activation_limit;
    uint32_t trace_bit;
    bool ids_int64;
};

/// The routed choices of one execution, in shared memory. Valid choices (a local expert's) are
/// grouped by expert into slots, in the order of each expert's first choice; within a slot in
/// increasing choice index t * top_k + j.
struct Routed {
    int32_t expert[kMaxChoices];  // local expert of choice i; -1: dropped, skipped or past T*k
    int32_t order[kMaxChoices];   // the valid choices, slot after slot
    int32_t position[kMaxChoices];  // choice i's index in order (valid choices only)
    int32_t slot_expert[kMaxChoices];
    int32_t slot_begin[kMaxChoices + 1];  // slot s: order[slot_begin[s], slot_begin[s + 1])
    int32_t slots;
    int32_t tokens;
};

// ---- Routing, in warp 0 --------------------------------------------------------------------

__device__ __forceinline__ int32_t local_expert_of(const DecodeParams& p, int64_t i,
                                                   int64_t choices, bool& hostile) {
    if (i >= choices) return -1;
    const int64_t id = p.ids_int64 ? static_cast<const int64_t*>(p.topk_ids)[i]
                                   : static_cast<const int32_t*>(p.topk_ids)[i];
    if (id < 0 || id >= p.num_experts) {
        hostile = true;
        return -1;
    }
    const int64_t local = id - p.first_expert;
    return local >= 0 && local < p.local_experts ? static_cast<int32_t>(local) : -1;
}

__device__ __forceinline__ int32_t inclusive_scan(int32_t v, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const int32_t other = __shfl_up_sync(kFullWarp, v, d);
        if (lane >= d) v += other;
    }
    return v;
}

/// Lane l routes choice l. Its slot leader is the first choice of its expert (match_any).
/// `report`: flag clamped counts and hostile ids (one block of one kernel).
__device__ void route(const DecodeParams& p, Routed& r, bool report) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    int64_t tokens = p.num_tokens;
    if (p.num_tokens_device != nullptr) {
        const int64_t asked = *p.num_tokens_device;
        tokens = asked < 0 ? 0 : (asked > p.max_tokens ? p.max_tokens : asked);
        if (report && lane == 0 && asked < 0)
            atomicOr(p.status_word, MOEGEMM_SIZES_CLAMPED_NEGATIVE);
        if (report && lane == 0 && asked > p.max_tokens)
            atomicOr(p.status_word, MOEGEMM_SIZES_CLAMPED_CAPACITY);
    }
    const int64_t choices = tokens * p.top_k;  // <= kMaxChoices (the plan's token limit)
    bool hostile = false;
    const int32_t expert = local_expert_of(p, lane, choices, hostile);
    if (report && __any_sync(kFullWarp, hostile) && lane == 0)
        atomicOr(p.status_word, MOEGEMM_ROWS_CLAMPED_INDEX);

    const unsigned below = (1u << lane) - 1u;
    const unsigned peers =
        __match_any_sync(kFullWarp, expert) & __ballot_sync(kFullWarp, expert >= 0);
    const bool leads = expert >= 0 && (peers & below) == 0;
    const unsigned leaders = __ballot_sync(kFullWarp, leads);
    // Slot sizes at their leaders, then where each slot begins in `order`.
    const int32_t size = leads ? __popc(peers) : 0;
    const int32_t end = inclusive_scan(size, lane);
    const int32_t leader = expert >= 0 ? __ffs(peers) - 1 : 0;
    const int32_t position = __shfl_sync(kFullWarp, end - size, leader) + __popc(peers & below);
    if (expert >= 0) r.order[position] = lane;
    r.expert[lane] = expert;
    r.position[lane] = expert >= 0 ? position : -1;
    if (leads) {
        const int slot = __popc(leaders & below);
        r.slot_expert[slot] = expert;
        r.slot_begin[slot] = end - size;
    }
    const int32_t valid = __shfl_sync(kFullWarp, end, 31);
    if (lane == 0) {
        const int slots = __popc(leaders);
        r.slots = slots;
        r.slot_begin[slots] = valid;
        r.tokens = static_cast<int32_t>(tokens);
    }
}

// ---- Dot products --------------------------------------------------------------------------

template <typename Half>
struct Element;
template <>
struct Element<__nv_bfloat16> {
    static __device__ __forceinline__ float2 pair(uint32_t v) {  // exact: bf16 is fp32's top half
        return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
    }
    static __device__ __forceinline__ __nv_bfloat16 round(float v) { return __float2bfloat16_rn(v); }
    static __device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
};
template <>
struct Element<__half> {
    static __device__ __forceinline__ float2 pair(uint32_t v) {
        __half2 h;
        memcpy(&h, &v, 4);
        return __half22float2(h);
    }
    static __device__ __forceinline__ __half round(float v) { return __float2half_rn(v); }
    static __device__ __forceinline__ float widen(__half v) { return __half2float(v); }
};

/// acc + the dot of two 16-byte vectors of 8 elements.
template <typename Half>
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
    const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const float2 a = Element<Half>::pair(wv[c]), b = Element<Half>::pair(xv[c]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}

__device__ __forceinline__ uint4 load_weights(const uint4* p, uint64_t policy) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(policy));
    return v;
}

__device__ __forceinline__ uint64_t evict_last_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes, uint64_t policy) {
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p),
                 "r"(bytes), "l"(policy)
                 : "memory");
}

/// The warp's sum of v, in every lane (a fixed butterfly: the same bits every run).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int d = 16; d >= 1; d /= 2) v += __shfl_xor_sync(kFullWarp, v, d);
    return v;
}

/// FC1's pass: acc[k][t] += this lane's share of row_k . staged row srow[t], for two weight
/// rows of `vectors` 16-byte vectors and the first `rows` of kTokenRows staged rows.
template <typename Half>
__device__ __forceinline__ void dot_row_pair(const uint4* row0, const uint4* row1, int64_t vectors,
                                             const uint4* stage, const int32_t (&srow)[kTokenRows],
                                             int rows, float (&acc)[2][kTokenRows], int lane,
                                             uint64_t policy) {
    for (int64_t v0 = lane; v0 < vectors; v0 += 32 * kRowBatch) {
        uint4 a[kRowBatch], b[kRowBatch];
#pragma unroll
        for (int q = 0; q < kRowBatch; ++q) {
            const int64_t v = v0 + 32 * q;
            a[q] = v < vectors ? load_weights(row0 + v, policy) : make_uint4(0, 0, 0, 0);
            b[q] = v < vectors ? load_weights(row1 + v, policy) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int q = 0; q < kRowBatch; ++q) {
            const int64_t v = v0 + 32 * q;
            if (v >= vectors) break;
#pragma unroll
            for (int t = 0; t < kTokenRows; ++t) {
                if (t >= rows) break;
                const uint4 x = stage[srow[t] * vectors + v];
                acc[0][t] = dot8<Half>(a[q], x, acc[0][t]);
                acc[1][t] = dot8<Half>(b[q], x, acc[1][t]);
            }
        }
    }
}

/// One step of an FC2 pass in a lane's registers: kChoiceBatch vectors of each of its rows.
struct ChoiceBatch {
    uint4 w[kChoiceRows][kChoiceBatch];

    /// Loads the vectors from v0 (this lane's first) of the first `rows` rows.
    __device__ __forceinline__ void load(const uint4* const (&row)[kChoiceRows], int rows,
                                         int64_t v0, int64_t vectors, uint64_t policy) {
#pragma unroll
        for (int c = 0; c < kChoiceRows; ++c) {
#pragma unroll
            for (int q = 0; q < kChoiceBatch; ++q) {
                const int64_t v = v0 + 32 * q;
                w[c][q] = c < rows && v < vectors ? load_weights(row[c] + v, policy)
                                                  : make_uint4(0, 0, 0, 0);
            }
        }
    }
};

/// FC2's pass: acc[c] += this lane's share of row[c] . stage row srow[c], for the first `rows`
/// of kChoiceRows (weight row, staged row) pairs.
template <typename Half>
__device__ __forceinline__ void dot_choice_rows(const uint4* const (&row)[kChoiceRows],
                                                int64_t vectors, const uint4* stage,
                                                const int32_t (&srow)[kChoiceRows], int rows,
                                                float (&acc)[kChoiceRows], int lane,
                                                uint64_t policy) {
    for (int64_t v0 = lane; v0 < vectors; v0 += 32 * kChoiceBatch) {
        ChoiceBatch b;
        b.load(row, rows, v0, vectors, policy);
#pragma unroll
        for (int c = 0; c < kChoiceRows; ++c) {
            if (c >= rows) break;
#pragma unroll
            for (int q = 0; q < kChoiceBatch; ++q) {
                const int64_t v = v0 + 32 * q;
                if (v < vectors) acc[c] = dot8<Half>(b.w[c][q], stage[srow[c] * vectors + v], acc[c]);
            }
        }
    }
}

/// Copies `count` 16-byte vectors from global memory into shared memory, the whole block.
__device__ __forceinline__ void stage_rows(uint4* stage, const uint4* src, int64_t count) {
    for (int64_t i = threadIdx.x; i < count; i += kThreads) stage[i] = src[i];
}

// ---- FC1 -----------------------------------------------------------------------------------

__device__ __forceinline__ float plain_activation(moegemm_activation_t a, float v) {
    switch (a) {
        case MOEGEMM_ACTIVATION_SILU: return ops::silu(v);
        case MOEGEMM_ACTIVATION_GELU_TANH: return ops::gelu_tanh(v);
        default: return v;
    }
}

__device__ __forceinline__ float gated_activation(const DecodeParams& p, float gate, float up) {
    switch (p.activation) {
        case MOEGEMM_ACTIVATION_GEGLU: return ops::Geglu{}(gate, up);
        case MOEGEMM_ACTIVATION_SWIGLU_CLAMPED:
            return ops::ClampedSwiglu{p.activation_alpha, p.activation_limit}(gate, up);
        default: return ops::Swiglu{}(gate, up);
    }
}

template <typename Half>
__device__ __forceinline__ float bias_at(const void* bias, int64_t index) {
    return bias != nullptr ? Element<Half>::widen(static_cast<const Half*>(bias)[index]) : 0.0f;
}

/// The two w1 rows of an FC1 item: a gated activation's gate and up rows of output column
/// `unit` (up first with UP_GATE_HALVES), or a plain one's rows 2 unit and 2 unit + 1.
struct Fc1Rows {
    int64_t first, second;
    __device__ Fc1Rows(const DecodeParams& p, bool gated, int64_t unit) {
        const bool halves = gated && p.gate_layout != MOEGEMM_GATE_UP_INTERLEAVED;
        first = halves ? unit : 2 * unit;
        second = halves ? p.intermediate + unit : 2 * unit + 1;
    }
};

template <typename Half>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) decode_fc1_kernel(DecodeParams p) {
    extern __shared__ uint4 stage[];  // x rows [T][H / 8]
    __shared__ Routed r;
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    const int64_t vectors = p.hidden / 8;
    ptx::wait_for_prior_grids();
    ptx::allow_dependent_grids();  // FC2 may start: everything before the layer has finished
    if (warp == 0) {
        route(p, r, blockIdx.x == 0);
    } else {  // x's rows, beside routing
        const int64_t count = token_count(p.num_tokens, p.num_tokens_device, p.max_tokens) * vectors;
        const auto* x = static_cast<const uint4*>(p.x);
        for (int64_t i = threadIdx.x - 32; i < count; i += kThreads - 32) stage[i] = x[i];
    }
    __syncthreads();
    if (p.trace_bit != 0 && blockIdx.x == 0 && threadIdx.x == 0 && r.slots > 0)
        atomicOr(p.status_word, p.trace_bit);

    const bool gated = p.activation == MOEGEMM_ACTIVATION_SWIGLU ||
                       p.activation == MOEGEMM_ACTIVATION_GEGLU ||
                       p.activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED;
    const bool up_first = p.gate_layout == MOEGEMM_UP_GATE_HALVES;
    const int64_t fc1_rows = gated ? 2 * p.intermediate : p.intermediate;
    // An item: one output column of a gated activation (its gate and up rows), or two
    // adjacent columns of a plain one.
    const int64_t units = gated ? p.intermediate : p.intermediate / 2;
    const int64_t items = int64_t{r.slots} * units;
    const uint64_t policy = ptx::evict_first_policy();
    Half* const h = static_cast<Half*>(p.h);

    for (int64_t item = int64_t{blockIdx.x} * kWarps + warp; item < items;
         item += int64_t{gridDim.x} * kWarps) {
        const int slot = static_cast<int>(item / units);
        const int64_t unit = item - slot * units;
        const int32_t expert = r.slot_expert[slot];
        const int32_t begin = r.slot_begin[slot], count = r.slot_begin[slot + 1] - begin;
        const Fc1Rows w(p, gated, unit);
        const int64_t expert_row = int64_t{expert} * fc1_rows;
        const float alpha = p.alpha1 != nullptr ? p.alpha1[expert] : 1.0f;
        for (int first = 0; first < count; first += kTokenRows) {
            const int rows = min(kTokenRows, count - first);
            int32_t srow[kTokenRows];
#pragma unroll
            for (int q = 0; q < kTokenRows; ++q)
                srow[q] = r.order[begin + first + min(q, rows - 1)] / p.top_k;
            float acc[2][kTokenRows] = {};
            dot_row_pair<Half>(p.w1 + (expert_row + w.first) * vectors,
                               p.w1 + (expert_row + w.second) * vectors, vectors, stage, srow, rows,
                               acc, lane, policy);
            float mine[2] = {0.0f, 0.0f};
#pragma unroll
            for (int q = 0; q < kTokenRows; ++q) {
                if (q >= rows) break;
                const float s0 = warp_sum(acc[0][q]), s1 = warp_sum(acc[1][q]);
                if (lane == q) mine[0] = s0, mine[1] = s1;
            }
            if (lane >= rows) continue;
            const int64_t choice = r.order[begin + first + lane];
            const float v0 = fmaf(mine[0], alpha, bias_at<Half>(p.b1, expert_row + w.first));
            const float v1 = fmaf(mine[1], alpha, bias_at<Half>(p.b1, expert_row + w.second));
            Half* const out = h + choice * p.intermediate;
            if (gated) {
                out[unit] = Element<Half>::round(up_first ? gated_activation(p, v1, v0)
                                                          : gated_activation(p, v0, v1));
            } else {
                out[2 * unit] = Element<Half>::round(plain_activation(p.activation, v0));
                out[2 * unit + 1] = Element<Half>::round(plain_activation(p.activation, v1));
            }
        }
    }
}

// ---- FC2 and the combine -------------------------------------------------------------------

template <typename Half>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) decode_fc2_kernel(DecodeParams p) {
    extern __shared__ uint4 stage[];  // h rows [T * top_k][I / 8]
    __shared__ Routed r;
    // FC2's outputs of the warp's columns: column g of its group, the choice at position q of
    // `order`, at [g * valid + q] (at most kMaxChoices: a group of several columns is one pass).
    __shared__ float y[kWarps][kMaxChoices];
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    // Before waiting for FC1: routing reads only the layer's inputs, complete once FC1 let
    // this kernel start.
    __shared__ float weights[kMaxChoices];  // topk_weights of the choices
    if (warp == 0) {
        route(p, r, false);
        __syncwarp();
        if (lane < r.tokens * p.top_k) weights[lane] = p.topk_weights[lane];
    }
    __syncthreads();
    const int64_t vectors = p.intermediate / 8;
    const int64_t row_bytes = p.intermediate * 2;
    const int valid = r.slot_begin[r.slots];
    // A warp's item: `group` adjacent columns of out, so that a pass has kChoiceRows weight
    // rows in flight however few choices there are (top-2 models at one token).
    const int group = max(1, kChoiceRows / max(valid, 1));
    const int64_t items = (p.hidden + group - 1) / group;
    const int64_t warps = int64_t{gridDim.x} * kWarps;
    const int64_t first_item = int64_t{blockIdx.x} * kWarps + warp;
    const uint4* const w2 = p.w2;

    // Prefetch this warp's rows, in the order it will read them, within its share of the budget.
    if (lane == 0 && valid > 0) {
        const uint64_t keep = evict_last_policy();
        const int64_t item_bytes = row_bytes * r.slots * group;
        int64_t budget = p.l2_prefetch_bytes / warps;
        for (int64_t item = first_item; item < items && budget >= item_bytes; item += warps) {
            for (int64_t n = item * group; n < min(p.hidden, (item + 1) * group); ++n) {
                for (int s = 0; s < r.slots; ++s)
                    prefetch_l2(w2 + (int64_t{r.slot_expert[s]} * p.hidden + n) * vectors,
                                static_cast<uint32_t>(row_bytes), keep);
            }
            budget -= item_bytes;
        }
    }
    // A pass over kChoiceRows (column, choice) pairs of an item: the w2 row of each pair and
    // the staged h row it is dotted with.
    const auto pass_rows = [&](int64_t n0, int first, int rows, const uint4* (&row)[kChoiceRows],
                               int32_t (&srow)[kChoiceRows]) {
#pragma unroll
        for (int q = 0; q < kChoiceRows; ++q) {
            const int pair = first + min(q, rows - 1);
            srow[q] = r.order[pair % valid];
            row[q] = w2 + (int64_t{r.expert[srow[q]]} * p.hidden + n0 + pair / valid) * vectors;
        }
    };
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();

    stage_rows(stage, static_cast<const uint4*>(p.h), int64_t{r.tokens} * p.top_k * vectors);
    __syncthreads();

    const uint64_t policy = ptx::evict_first_policy();
    Half* const out = static_cast<Half*>(p.out);
    for (int64_t item = first_item; item < items; item += warps) {
        const int64_t n0 = item * group;
        const int columns = static_cast<int>(min(int64_t{group}, p.hidden - n0));
        const int pairs = valid * columns;  // (column, choice) pairs: one w2 row each
        for (int first = 0; first < pairs; first += kChoiceRows) {
            const int rows = min(kChoiceRows, pairs - first);
            const uint4* row[kChoiceRows];
            int32_t srow[kChoiceRows];
            pass_rows(n0, first, rows, row, srow);
            float acc[kChoiceRows] = {};
            dot_choice_rows<Half>(row, vectors, stage, srow, rows, acc, lane, policy);
            float mine = 0.0f;
#pragma unroll
            for (int q = 0; q < kChoiceRows; ++q) {
                if (q >= rows) break;
                const float s = warp_sum(acc[q]);
                if (lane == q) mine = s;
            }
            if (lane < rows) {
                const int pair = first + lane;
                const int64_t n = n0 + pair / valid;
                const int32_t expert = r.expert[r.order[pair % valid]];
                const float alpha = p.alpha2 != nullptr ? p.alpha2[expert] : 1.0f;
                const float v = fmaf(mine, alpha, bias_at<Half>(p.b2, int64_t{expert} * p.hidden + n));
                y[warp][pair] = Element<Half>::widen(Element<Half>::round(v));
            }
        }
        __syncwarp();
        // The combine: sum over j in increasing j, products and sums rounded apart.
        for (int task = lane; task < r.tokens * columns; task += 32) {
            const int t = task / columns, g = task - t * columns;
            float sum = 0.0f;
            for (int j = 0; j < p.top_k; ++j) {
                const int i = t * p.top_k + j;
                if (r.expert[i] >= 0)
                    sum = __fadd_rn(sum, __fmul_rn(weights[i], y[warp][g * valid + r.position[i]]));
            }
            out[int64_t{t} * p.hidden + n0 + g] = Element<Half>::round(sum);
        }
        __syncwarp();
    }
}

template <typename Half>
void launch_kernels(const DecodeParams& params, const DecodeShape& shape, int32_t sm_count,
                    bool dependent_launch, cudaStream_t stream) {
    const int64_t tokens = params.num_tokens_device != nullptr ? shape.max_tokens : params.num_tokens;
    const int grid = std::max(sm_count, 1) * kBlocksPerSm;
    launch_layer_kernel(decode_fc1_kernel<Half>, "decode FC1 kernel", grid, kThreads,
                        static_cast<std::size_t>(tokens * shape.hidden * 2), dependent_launch,
                        stream, params);
    launch_layer_kernel(decode_fc2_kernel<Half>, "decode FC2 kernel", grid, kThreads,
                        static_cast<std::size_t>(tokens * shape.top_k * shape.intermediate * 2),
                        dependent_launch, stream, params);
}

void allow_smem(const void* kernel, std::size_t bytes) {
    const cudaError_t error =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (error != cudaSuccess) throw_cuda_error(static_cast<int>(error), "decode kernels' shared memory");
}

template <typename Half>
void allow_stage_bytes() {
    allow_smem(reinterpret_cast<const void*>(decode_fc1_kernel<Half>), kDecodeStageBytes);
    allow_smem(reinterpret_cast<const void*>(decode_fc2_kernel<Half>), kDecodeStageBytes);
}

}  // namespace

void prepare_decode_layer(moegemm_dtype_t dtype) {
    if (dtype == MOEGEMM_DTYPE_F16)
        allow_stage_bytes<__half>();
    else
        allow_stage_bytes<__nv_bfloat16>();
}

void launch_decode_layer(const DecodeShape& shape, const DecodeTensors& t, void* h,
                         uint32_t* status_word, uint32_t trace_bit, int32_t sm_count,
                         std::size_t l2_bytes, bool dependent_launch, cudaStream_t stream) {
    DecodeParams p{};
    p.x = t.x;
    p.topk_ids = t.topk_ids;
    p.topk_weights = t.topk_weights;
    p.w1 = static_cast<const uint4*>(t.w1);
    p.w2 = static_cast<const uint4*>(t.w2);
    p.b1 = t.b1;
    p.b2 = t.b2;
    p.alpha1 = t.alpha1;
    p.alpha2 = t.alpha2;
    p.out = t.out;
    p.h = h;
    p.num_tokens_device = t.num_tokens_device;
    p.status_word = status_word;
    p.num_tokens = t.num_tokens;
    p.max_tokens = shape.max_tokens;
    p.hidden = shape.hidden;
    p.intermediate = shape.intermediate;
    // Half of L2: FC1's evict-first stream and the caller's data keep the rest.
    p.l2_prefetch_bytes = static_cast<int64_t>(l2_bytes / 2);
    p.num_experts = shape.num_experts;
    p.first_expert = shape.first_expert;
    p.local_experts = shape.local_experts;
    p.top_k = shape.top_k;
    p.activation = shape.activation;
    p.gate_layout = shape.gate_layout;
    p.activation_alpha = shape.activation_alpha;
    p.activation_limit = shape.activation_limit;
    p.trace_bit = trace_bit;
    p.ids_int64 = shape.ids_int64;
    if (shape.dtype == MOEGEMM_DTYPE_F16)
        launch_kernels<__half>(p, shape, sm_count, dependent_launch, stream);
    else
        launch_kernels<__nv_bfloat16>(p, shape, sm_count, dependent_launch, stream);
}

}  // namespace moegemm::moe
