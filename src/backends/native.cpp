// Host side of the native backend: which problems it serves, and the Kernel object that
// encodes the tensor-map templates once and launches the persistent grouped GEMM.
#include "backends/native.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "error.hpp"
#include "native/grouped_gemm_launch.hpp"
#include "native/launch_plan.hpp"
#include "native/tensor_map.hpp"
#include "native/tile_scheduler.cuh"
#include "recently_checked.hpp"
#include "registry.hpp"

namespace moegemm {
namespace native {

namespace {

constexpr int64_t kMaxCoordinate = std::numeric_limits<int32_t>::max();

// Rows of A and D as one 2-D tensor: the VARIABLE capacity, or every slab.
int64_t tensor_rows(const ProblemDesc& p) {
    return p.layout == MOEGEMM_LAYOUT_VARIABLE ? p.max_rows : p.max_rows * p.num_experts;
}

// Workspace, laid out for a grid of one CTA per SM (`ctas`) whatever a launch's grid: the
// tensor maps (kTensorMapsPerCta per CTA), then the tile-ticket word (a 256-byte region).
// Nothing in it needs zeros from the caller: the ticket word is tagged per launch (and
// cleared once per workspace only for initcheck's sake).
constexpr std::size_t kTicketBytes = 256;
std::size_t tensor_map_bytes(int ctas) {
    return static_cast<std::size_t>(ctas) * kTensorMapsPerCta * kTensorMapBytes;
}
std::size_t ticket_offset(int ctas) { return tensor_map_bytes(ctas); }

class GroupedGemm final : public Kernel {
public:
    GroupedGemm(const Config& config, const ProblemDesc& p, const DeviceCaps& d,
                const ExpertSizes& sizes, uint32_t* status_word)
        : problem_(p), config_(config) {
        const int block_n = config.block_n;
        const GroupedGemmShape shape{config.block_m, block_n, config.tma_store, config.cluster_n,
                                     p.weight_layout == MOEGEMM_WEIGHTS_KN, config.swap_ab};
        switch (p.a_type) {
            case MOEGEMM_DTYPE_F16: entry_ = grouped_gemm_f16(shape, p.d_type); break;
            case MOEGEMM_DTYPE_E4M3: entry_ = grouped_gemm_e4m3(shape, p.d_type); break;
            default: entry_ = grouped_gemm_bf16(shape, p.d_type); break;
        }
        require(entry_.launch != nullptr, MOEGEMM_STATUS_INTERNAL_ERROR,
                "no native instance for {} -> {} with {}x{} tiles, {} epilogue, cluster {}",
                dtype_name(p.a_type), dtype_name(p.d_type), config.block_m, block_n,
                config.tma_store ? "TMA-store" : "register", config.cluster_n);
        MOEGEMM_CUDA_CHECK(entry_.configure());
        encode_tensor_map_templates();

        const LaunchPlan plan = plan_launch(config, p, d, sizes, entry_);
        std::memset(&params_, 0, sizeof params_);
        params_.status_word = status_word;
        params_.max_rows = p.max_rows;
        params_.num_experts = p.num_experts;
        params_.n = static_cast<int32_t>(p.n);
        params_.k = static_cast<int32_t>(p.k);
        params_.layout = row_layout(p.layout);
        params_.stages = plan.stages;
        params_.scale_mode = static_cast<int32_t>(p.scale_mode);
        params_.device_sizes = sizes.source == SizesSource::Device ? sizes.device : nullptr;
        std::copy(plan.host_words.begin(), plan.host_words.end(), params_.host_sizes);
        params_.host_schedule = plan.host_schedule ? 1 : 0;
        params_.block_scale_ring = plan.block_scale_ring;
        params_.dependent_launch = p.options.dependent_launch ? 1 : 0;
        params_.skip_idle_halves = plan.skip_idle_halves ? 1 : 0;
        params_.unhinted_weight_copies = plan.unhinted_weight_copies;
        params_.trace_features = p.options.trace_features ? 1 : 0;
        params_.d_cols = static_cast<int32_t>(output_columns(p));
        params_.fused_epilogue = p.epilogue_inputs != 0 || p.activation != MOEGEMM_ACTIVATION_NONE;
        params_.bias_type = static_cast<int32_t>(p.bias_type);
        params_.activation = static_cast<int32_t>(p.activation);
        params_.gated = is_gated(p.activation) ? 1 : 0;
        params_.up_first = p.gate_layout == MOEGEMM_UP_GATE_HALVES ? 1 : 0;
        params_.gate_layout = static_cast<int32_t>(p.gate_layout);
        params_.activation_alpha = p.activation_alpha;
        params_.activation_limit = p.activation_limit;
        params_.gather_rows = static_cast<int32_t>(p.gather_rows);
        grid_ = plan.grid;
        tile_tickets_ = plan.tile_tickets;
        // The workspace is laid out for one CTA per SM, whatever this plan's grid.
        ticket_offset_ = ticket_offset(std::max(d.sm_count, 1));
    }

    // No host encoding per call: the kernel makes its tensor maps in the workspace from these
    // templates and the addresses passed below.
    void launch(const ExecuteArgs& args, CUstream_st* stream) const override {
        if (grid_ == 0) return;
        GroupedGemmParams params = params_;
        params.a = args.a;
        params.b = args.b;
        params.d = args.d;
        params.tensor_maps = args.workspace;
        params.a_scale = args.a_scale;
        params.b_scale = args.b_scale;
        params.alpha = args.alpha;
        params.row_scale = args.row_scale;
        params.bias = args.bias;
        params.a_rows = args.a_rows;
        if (args.device_sizes != nullptr) {
            // Only in place of device sizes: a host-sized launch carries its schedule instead.
            require(params.device_sizes != nullptr, MOEGEMM_STATUS_INTERNAL_ERROR,
                    "device sizes passed to a plan made with host sizes");
            params.device_sizes = args.device_sizes;
        }
        auto* const workspace = static_cast<unsigned char*>(args.workspace);
        if (tile_tickets_) {
            params.tile_tickets =
                reinterpret_cast<unsigned long long*>(workspace + ticket_offset_);
            // Any value of the word is safe (the launch tag), but a workspace fresh from
            // cudaMalloc leaves it unwritten, and compute-sanitizer's initcheck reports the
            // kernel's first read of it. Cleared once per workspace this kernel has not seen
            // lately (stream-ordered: under capture the clear is captured too).
            if (!cleared_ticket_words_.contains(workspace)) {
                MOEGEMM_CUDA_CHECK(cudaMemsetAsync(params.tile_tickets, 0,
                                                   sizeof(unsigned long long), stream));
                cleared_ticket_words_.add(workspace);
            }
        }
        MOEGEMM_CUDA_CHECK(entry_.launch(templates_, params, grid_, stream));
    }

    std::string describe() const override {
        return fmt::format(
            "tile {}x{}x{}{}, {} stages, {} epilogue{}, cluster {}x1, persistent grid {}{}, "
            "{}{}{}{}{}",
            config_.block_m, config_.block_n, block_k(problem_.a_type),
            config_.swap_ab ? " swap-AB (tokens on wgmma N)" : "", params_.stages,
            config_.tma_store ? "TMA-store" : "register", epilogue_description(),
            config_.cluster_n, grid_,
            params_.device_sizes ? " (sizes read on the GPU)" : "",
            tile_tickets_ ? "tile tickets" : "round robin",
            params_.host_schedule ? ", schedule built on the host" : "",
            params_.block_scale_ring ? ", BLOCK scales staged in shared memory" : "",
            params_.skip_idle_halves ? ", halves without rows skip their MMAs" : "",
            params_.unhinted_weight_copies > 0
                ? fmt::format(", first {} weight copies unhinted", params_.unhinted_weight_copies)
                : std::string());
    }

private:
    // The fused operations and the gather, for describe().
    std::string epilogue_description() const {
        const ProblemDesc& p = problem_;
        std::string out;
        if (p.epilogue_inputs & MOEGEMM_EPILOGUE_ALPHA) out += " * alpha";
        if (p.epilogue_inputs & MOEGEMM_EPILOGUE_ROW_SCALE) out += " * row scale";
        if (p.epilogue_inputs & MOEGEMM_EPILOGUE_BIAS) out += " + bias";
        if (p.activation != MOEGEMM_ACTIVATION_NONE)
            out += fmt::format(" -> {}", activation_name(p.activation));
        if (p.gather_rows > 0) out += ", A rows gathered";
        return out;
    }

    // The tensor maps (TensorMapIndex) with everything but the global address, which the
    // kernel replaces. Encoded at an aligned placeholder address: encoding reads no memory.
    void encode_tensor_map_templates() {
        const ProblemDesc& p = problem_;
        const void* placeholder = reinterpret_cast<const void*>(uintptr_t{1} << 20);
        std::memset(&templates_, 0, sizeof templates_);
        // In a cluster, each CTA loads its share of the A rows for all of them; the shorter
        // boxes serve tiles with fewer rows. A gathered A is read one row per box (the gather
        // producer) from the caller's token matrix; the shorter boxes are then unused.
        for (int box = 0; box < kABoxHeights; ++box) {
            templates_.maps[kMapAFull + box] =
                p.gather_rows > 0
                    ? make_kmajor_tensor_map(placeholder, p.a_type, p.gather_rows, p.k, 1,
                                             block_k(p.a_type))
                    : make_kmajor_tensor_map(placeholder, p.a_type, tensor_rows(p), p.k,
                                             (config_.block_m / config_.cluster_n) >> box,
                                             block_k(p.a_type));
        }
        // Swap-AB (decode) tiles read each weight once: exact L2 fills (tensor_map.hpp).
        const L2Fill weight_fill = config_.swap_ab ? L2Fill::Exact : L2Fill::Widened;
        if (is_gated(p.activation)) {
            templates_.maps[kMapB] = make_gate_up_weights_tensor_map(
                placeholder, p.b_type, p.num_experts, p.n, p.k, config_.block_n,
                block_k(p.b_type), p.gate_layout == MOEGEMM_GATE_UP_INTERLEAVED,
                gate_up_group(config_.swap_ab, config_.block_m, config_.block_n), weight_fill);
        } else {
            templates_.maps[kMapB] =
                p.weight_layout == MOEGEMM_WEIGHTS_KN
                    ? make_nmajor_weights_tensor_map(placeholder, p.b_type, p.num_experts, p.k,
                                                     p.n, weight_fill)
                    : make_kmajor_tensor_map(placeholder, p.b_type, p.n * p.num_experts, p.k,
                                             config_.block_n, block_k(p.b_type), weight_fill);
        }
        // With the TMA-store epilogue, full 64-row halves leave through TMA stores (64 x 64 boxes).
        if (config_.tma_store) {
            templates_.maps[kMapD] =
                make_kmajor_tensor_map(placeholder, p.d_type, tensor_rows(p),
                                       output_columns(p), 64, 64);
        }
    }

    ProblemDesc problem_;
    Config config_;
    int grid_ = 0;
    bool tile_tickets_ = false;      // params.tile_tickets set at launch
    std::size_t ticket_offset_ = 0;  // where the ticket word sits in the workspace
    // Workspaces whose ticket word this kernel cleared (launch); a repeated clear is harmless.
    mutable RecentlyChecked<const void*> cleared_ticket_words_;
    GroupedGemmEntry entry_{};
    GroupedGemmParams params_;
    TensorMapTemplates templates_{};
};

}  // namespace

bool can_implement(const Config& config, const ProblemSummary& p, const DeviceCaps& d,
                   std::string* why) {
    if (d.cc_major != 9 || d.cc_minor != 0) {
        *why = fmt::format("native kernels are built for sm_90a (H100/H200); the device is {}.{}",
                           d.cc_major, d.cc_minor);
        return false;
    }
    if (p.a_type == MOEGEMM_DTYPE_E4M3) {
        if (config.swap_ab && p.scale_mode == MOEGEMM_SCALE_BLOCK) {
            *why = "swap-AB kernels take no BLOCK scales (per-token scales in every k-block); "
                   "E4M3 decode with BLOCK scales uses the 64-row tiles";
            return false;
        }
        if (p.weight_layout != MOEGEMM_WEIGHTS_NK) {
            *why = "E4M3 weights must be [E, N, K] (K contiguous, WEIGHTS_NK): fp8 wgmma reads "
                   "both operands K-major; transpose the weights once when loading them";
            return false;
        }
    }
    if (is_gated(p.activation) && p.weight_layout != MOEGEMM_WEIGHTS_NK) {
        *why = "gated activations read gate and up rows of [E, N, K] weights (WEIGHTS_NK)";
        return false;
    }
    if (p.gather && config.cluster_n > 1) {
        *why = "gathered A rows are loaded by each CTA alone (no clusters)";
        return false;
    }
    const int64_t rows = p.layout == MOEGEMM_LAYOUT_VARIABLE ? p.max_rows
                                                             : p.max_rows * p.num_experts;
    if (rows > kMaxCoordinate || p.n * p.num_experts > kMaxCoordinate) {
        *why = "A, B or D has more than 2^31 - 1 rows (TMA coordinates are 32-bit)";
        return false;
    }
    if (config.tma_store && p.d_type == MOEGEMM_DTYPE_F32) {
        *why = "the TMA-store epilogue writes 16-bit outputs only";
        return false;
    }
    const int64_t tiles_n = (p.n + config.block_n - 1) / config.block_n;
    // Tile indices are 32-bit in the kernel: bound the most tiles any sizes can produce (a
    // VARIABLE expert adds at most one partial row tile to the capacity's).
    const int64_t row_tiles =
        p.layout == MOEGEMM_LAYOUT_VARIABLE
            ? (p.max_rows + p.num_experts * int64_t{config.block_m - 1}) / config.block_m
            : p.num_experts * ((p.max_rows + config.block_m - 1) / config.block_m);
    if (row_tiles * tiles_n > kMaxCoordinate) {
        *why = fmt::format("up to {} output tiles: more than the kernel's 32-bit tile indices",
                           row_tiles * tiles_n);
        return false;
    }
    if (tiles_n % config.cluster_n != 0) {
        *why = fmt::format("clusters of {} need a multiple of {} column tiles; N = {} has {}",
                           config.cluster_n, config.cluster_n, p.n, tiles_n);
        return false;
    }
    return true;
}

// Room for the largest grid, one CTA per SM: tensor maps and the ticket word.
std::size_t workspace_bytes(const ProblemDesc&, const DeviceCaps& d) {
    return ticket_offset(std::max(d.sm_count, 1)) + kTicketBytes;
}

std::unique_ptr<Kernel> create(const Config& config, const ProblemDesc& p, const DeviceCaps& d,
                               const ExpertSizes& sizes, BackendResources& r) {
    return std::make_unique<GroupedGemm>(config, p, d, sizes, r.status_word);
}

}  // namespace native
}  // namespace moegemm
