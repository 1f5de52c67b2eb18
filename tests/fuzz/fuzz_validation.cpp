// libFuzzer target over the library's pure host code: problem validation, expert sizes, execute
// argument checks, tensor extents, kernel selection with a fuzzed DeviceCaps, and the native
// kernel's tile schedule (the same functions the GPU runs). A moegemm::Error must carry a
// defined status and a message; any other exception, a crash or a sanitizer report is a bug.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "error.hpp"
#include "fuzz_common.hpp"
#include "heuristic.hpp"
#include "native/tile_scheduler.cuh"
#include "problem.hpp"
#include "registry.hpp"

using namespace moegemm;

namespace {

void check_error(const Error& e) {
    FUZZ_CHECK(defined_status(e.status()) && e.status() != MOEGEMM_STATUS_SUCCESS);
    FUZZ_CHECK(e.what() != nullptr && e.what()[0] != '\0');
}

template <typename T>
void set_int_field(T& field, int value) {
    std::memcpy(&field, &value, sizeof value);
}

int64_t pick_dim(FuzzedDataProvider& fdp) {
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
        case 0: return 8 * fdp.ConsumeIntegralInRange<int64_t>(1, 1024);
        case 1: return fdp.ConsumeIntegralInRange<int64_t>(-2, 70000);
        case 2: return fdp.PickValueInArray<int64_t>({0, 1, 8, 16, INT32_MAX, int64_t{INT32_MAX} + 1,
                                                      INT64_MAX, INT64_MIN, int64_t{1} << 40,
                                                      (int64_t{1} << 31) - 8});
        default: return fdp.ConsumeIntegral<int64_t>();
    }
}

int pick_enum(FuzzedDataProvider& fdp, int last) {
    return fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int>(0, last)
                             : fdp.ConsumeIntegral<int>();
}

// A pointer value that is never dereferenced: realistic user-space range, often aligned.
const void* pick_ptr(FuzzedDataProvider& fdp) {
    const int kind = fdp.ConsumeIntegralInRange<int>(0, 3);
    uintptr_t v = fdp.ConsumeIntegralInRange<uintptr_t>(0, uintptr_t{1} << 47);
    if (kind == 0) return nullptr;
    if (kind == 1) v &= ~uintptr_t{255};
    if (kind == 2) v &= ~uintptr_t{15};
    return reinterpret_cast<const void*>(v);
}

bool overlaps128(const void* p, size_t pb, const void* q, size_t qb) {
    if (!p || !q || pb == 0 || qb == 0) return false;
    const unsigned __int128 a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
    return a < b + qb && b < a + pb;
}

void check_selection(const Selection& sel, const ProblemSummary& sum, const DeviceCaps& caps,
                     const ProblemDesc& desc) {
    FUZZ_CHECK(defined_status(sel.status));
    if (sel.status != MOEGEMM_STATUS_SUCCESS) {
        FUZZ_CHECK(!sel.reason.empty());
        return;
    }
    const KernelVariant& v = variant(sel.kernel);  // throws INTERNAL_ERROR if unregistered
    FUZZ_CHECK(sum.backend == MOEGEMM_BACKEND_AUTO || sum.backend == v.backend);
    std::string why;
    FUZZ_CHECK(v.can_implement(sum, caps, &why));
    (void)v.workspace_bytes(desc, caps);
}

// --- the tile schedule, as tests/cpu/test_tile_schedule.cpp checks it ---
void fuzz_schedule(FuzzedDataProvider& fdp) {
    using namespace moegemm::native;
    const auto layout = static_cast<RowLayout>(fdp.ConsumeIntegralInRange<int>(0, 2));
    const int32_t experts = fdp.ConsumeIntegralInRange<int32_t>(1, MOEGEMM_MAX_EXPERTS);
    const int64_t max_rows = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int64_t>(1, 4096)
                                               : fdp.ConsumeIntegralInRange<int64_t>(1, INT32_MAX);
    const int32_t block_m = fdp.PickValueInArray<int32_t>({64, 128});
    const int32_t block_n = fdp.PickValueInArray<int32_t>({128, 256});
    const int32_t cluster_n = fdp.PickValueInArray<int32_t>({1, 2});
    const int32_t n = 8 * fdp.ConsumeIntegralInRange<int32_t>(1, 4096);
    const int32_t tiles_n = (n + block_n - 1) / block_n;
    std::vector<int32_t> raw(static_cast<size_t>(experts), 0);
    for (auto& m : raw) {
        if (fdp.remaining_bytes() == 0) break;
        switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
            case 0: m = 0; break;
            case 1: m = fdp.ConsumeIntegralInRange<int32_t>(-3, 600); break;
            case 2: m = fdp.PickValueInArray<int32_t>({INT32_MAX, INT32_MIN, -1, 127, 128, 129}); break;
            default: m = fdp.ConsumeIntegral<int32_t>(); break;
        }
    }
    if (tiles_n % cluster_n != 0) return;  // not a configuration the kernel accepts

    std::vector<ExpertRows> rows;
    std::vector<int64_t> start64{0};
    int64_t prefix = 0;
    uint32_t flags = 0;
    for (int32_t e = 0; e < experts; ++e) {
        const ExpertRows x = clamp_expert_rows(layout, e, raw[e], prefix, max_rows);
        prefix += std::max(raw[e], 0);
        rows.push_back(x);
        flags |= x.flags;
        FUZZ_CHECK(x.rows >= 0);
        FUZZ_CHECK(layout == RowLayout::Fixed || x.rows <= std::max(raw[e], 0));
        FUZZ_CHECK(x.rows <= max_rows);
        FUZZ_CHECK(((x.flags & kClampedNegative) != 0) == (raw[e] < 0));
        if (layout == RowLayout::Variable) {
            const int64_t prev_end = e == 0 ? 0 : rows[e - 1].row_start + rows[e - 1].rows;
            FUZZ_CHECK(x.row_start == prev_end && x.row_start + x.rows <= max_rows);
        } else {
            FUZZ_CHECK(x.row_start == int64_t{e} * max_rows);
            FUZZ_CHECK(layout != RowLayout::Fixed || x.rows == max_rows);
        }
        start64.push_back(start64.back() +
                          (int64_t{x.rows} + block_m - 1) / block_m * tiles_n);
    }
    // Tile numbers are 32-bit in the kernel: only schedules whose total fits are mapped.
    // (A total past INT32_MAX needs an output of > 2^44 elements; see README.)
    if (start64.back() > INT32_MAX) return;
    std::vector<int32_t> tile_start;
    for (int32_t e = 0; e < experts; ++e) {
        const int32_t t = expert_tiles(rows[e].rows, block_m, tiles_n);
        FUZZ_CHECK(int64_t{t} == start64[e + 1] - start64[e]);
        tile_start.push_back(static_cast<int32_t>(start64[e]));
    }
    tile_start.push_back(static_cast<int32_t>(start64.back()));
    const int32_t total = tile_start.back();

    const bool exhaustive = total <= (1 << 14);
    std::set<std::tuple<int32_t, int32_t, int32_t>> seen;
    const int32_t probes = exhaustive ? total : 4096;
    for (int32_t i = 0; i < probes; ++i) {
        const int32_t tile = exhaustive ? i : fdp.ConsumeIntegralInRange<int32_t>(0, total - 1);
        const TileCoord c = map_tile(tile, tile_start.data(), experts, tiles_n, cluster_n);
        FUZZ_CHECK(c.expert >= 0 && c.expert < experts);
        const int32_t r = rows[c.expert].rows;
        FUZZ_CHECK(r > 0);
        FUZZ_CHECK(c.m_tile >= 0 && c.m_tile < (int64_t{r} + block_m - 1) / block_m);
        FUZZ_CHECK(c.n_tile >= 0 && c.n_tile < tiles_n);
        FUZZ_CHECK(tile >= tile_start[c.expert] && tile < tile_start[c.expert + 1]);
        if (tile % cluster_n != 0) {
            const TileCoord lead = map_tile(tile - tile % cluster_n, tile_start.data(), experts,
                                            tiles_n, cluster_n);
            FUZZ_CHECK(lead.expert == c.expert && lead.m_tile == c.m_tile &&
                       lead.n_tile + tile % cluster_n == c.n_tile);
        }
        if (exhaustive) FUZZ_CHECK(seen.insert({c.expert, c.m_tile, c.n_tile}).second);
        if (!exhaustive && fdp.remaining_bytes() == 0) break;
    }
}

void fuzz_problem(FuzzedDataProvider& fdp) {
    moegemm_problem_t p = default_problem();
    if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0)
        p.struct_size = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<size_t>(0, 200)
                                          : fdp.ConsumeIntegral<size_t>();
    set_int_field(p.layout, pick_enum(fdp, 2));
    p.num_experts = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int32_t>(1, 1024)
                                      : fdp.ConsumeIntegral<int32_t>();
    p.n = pick_dim(fdp);
    p.k = pick_dim(fdp);
    p.max_rows = pick_dim(fdp);
    const int in = pick_enum(fdp, 3);
    set_int_field(p.a_type, in);
    set_int_field(p.b_type, fdp.ConsumeIntegralInRange<int>(0, 5) ? in : pick_enum(fdp, 3));
    set_int_field(p.d_type, pick_enum(fdp, 3));
    set_int_field(p.weight_layout, pick_enum(fdp, 1));
    set_int_field(p.scale_mode, fdp.ConsumeIntegralInRange<int>(0, 3) ? 0 : pick_enum(fdp, 4));
    set_int_field(p.backend, pick_enum(fdp, 2));
    p.device = fdp.ConsumeIntegralInRange<int32_t>(-2, 4);
    p.expected_rows = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int64_t>(0, 9000) : pick_dim(fdp);
    std::string fk;
    if (fdp.ConsumeBool()) {
        fk = fdp.ConsumeBool() ? fdp.ConsumeRandomLengthString(64)
                               : std::string(registry_begin()[fdp.ConsumeIntegralInRange<int>(
                                                 0, static_cast<int>(registry_end() - registry_begin()) - 1)]
                                                 .name);
        p.force_kernel = fk.c_str();
    }

    // The caller's buffer is as large as struct_size claims (up to the 4096 the library may
    // read); bytes past the struct are zero or fuzzed.
    const size_t alloc = p.struct_size > sizeof p && p.struct_size <= 4096 ? p.struct_size : sizeof p;
    std::vector<unsigned char> image(alloc, 0);
    std::memcpy(image.data(), &p, sizeof p);
    if (alloc > sizeof p && fdp.ConsumeBool()) {
        const std::vector<uint8_t> tail = fdp.ConsumeBytes<uint8_t>(alloc - sizeof p);
        if (!tail.empty()) std::memcpy(image.data() + sizeof p, tail.data(), tail.size());
    }
    ProblemDesc desc;
    try {
        desc = validate_problem(reinterpret_cast<const moegemm_problem_t*>(image.data()));
    } catch (const Error& e) {
        check_error(e);
        return;
    }
    // What validation guarantees.
    FUZZ_CHECK(p.struct_size >= sizeof p && p.struct_size <= 4096);
    FUZZ_CHECK(desc.num_experts >= 1 && desc.num_experts <= MOEGEMM_MAX_EXPERTS);
    for (int64_t v : {desc.n, desc.k, desc.max_rows}) FUZZ_CHECK(v >= 1 && v <= INT32_MAX);
    // 16-bit inputs without scales, or E4M3 inputs with a scale mode (16-byte rows: K and N
    // multiples of 16 elements).
    const bool e4m3 = desc.a_type == MOEGEMM_DTYPE_E4M3;
    FUZZ_CHECK(desc.n % (e4m3 ? 16 : 8) == 0 && desc.k % (e4m3 ? 16 : 8) == 0);
    FUZZ_CHECK(desc.a_type == desc.b_type &&
               (desc.a_type == MOEGEMM_DTYPE_BF16 || desc.a_type == MOEGEMM_DTYPE_F16 || e4m3));
    FUZZ_CHECK(desc.d_type == MOEGEMM_DTYPE_BF16 || desc.d_type == MOEGEMM_DTYPE_F16 ||
               desc.d_type == MOEGEMM_DTYPE_F32);
    FUZZ_CHECK((desc.scale_mode != MOEGEMM_SCALE_NONE) == e4m3);
    FUZZ_CHECK(desc.device >= 0 && desc.expected_rows >= 0 && desc.expected_rows <= desc.max_rows);
    FUZZ_CHECK(desc.force_kernel == std::string(fk.c_str()));  // up to the first NUL

    // --- expert sizes ---
    ExpertSizes sizes = initial_sizes(desc);
    std::vector<int32_t> host(static_cast<size_t>(desc.num_experts), 0);
    const int32_t cap = static_cast<int32_t>(std::min<int64_t>(desc.max_rows, INT32_MAX));
    for (auto& m : host) {
        if (fdp.remaining_bytes() == 0) break;
        switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
            case 0: m = 0; break;
            case 1: m = fdp.ConsumeIntegralInRange<int32_t>(0, std::max(1, cap / desc.num_experts)); break;
            case 2: m = fdp.ConsumeIntegralInRange<int32_t>(-2, cap); break;
            default: m = fdp.ConsumeIntegral<int32_t>(); break;
        }
    }
    const int source = fdp.ConsumeIntegralInRange<int>(0, 2);
    try {
        if (source == 1) {
            sizes = make_host_sizes(desc, fdp.ConsumeIntegralInRange<int>(0, 15) ? host.data() : nullptr);
            FUZZ_CHECK(desc.layout != MOEGEMM_LAYOUT_FIXED && sizes.source == SizesSource::Host);
            int64_t total = 0;
            int32_t largest = 0, active = 0;
            for (int32_t e = 0; e < desc.num_experts; ++e) {
                FUZZ_CHECK(sizes.host[e] == host[e] && host[e] >= 0);
                FUZZ_CHECK(desc.layout != MOEGEMM_LAYOUT_MASKED || host[e] <= desc.max_rows);
                total += host[e];
                largest = std::max(largest, host[e]);
                active += host[e] > 0;
            }
            FUZZ_CHECK(desc.layout != MOEGEMM_LAYOUT_VARIABLE || total <= desc.max_rows);
            FUZZ_CHECK(sizes.total_rows == total && sizes.largest == largest &&
                       sizes.active_experts == active);
        } else if (source == 2) {
            const auto* dp = static_cast<const int32_t*>(pick_ptr(fdp));
            if (fdp.ConsumeBool() && dp) dp = reinterpret_cast<const int32_t*>(
                                              reinterpret_cast<uintptr_t>(dp) | fdp.ConsumeIntegralInRange<uintptr_t>(0, 3));
            sizes = make_device_sizes(desc, dp);
            FUZZ_CHECK(desc.layout != MOEGEMM_LAYOUT_FIXED && dp != nullptr &&
                       reinterpret_cast<uintptr_t>(dp) % 4 == 0 && sizes.device == dp);
        }
    } catch (const Error& e) {
        check_error(e);
        FUZZ_CHECK(e.status() == MOEGEMM_STATUS_INVALID_VALUE || e.status() == MOEGEMM_STATUS_MISALIGNED);
    }

    // --- extents: exact (no wrap-around), since the overlap checks rely on them ---
    const TensorExtents x = tensor_extents(desc, sizes);
    {
        using u128 = unsigned __int128;
        const u128 in_b = dtype_bytes(desc.a_type), out_b = dtype_bytes(desc.d_type);
        u128 rows = static_cast<u128>(desc.max_rows);
        if (desc.layout != MOEGEMM_LAYOUT_VARIABLE) rows *= static_cast<u128>(desc.num_experts);
        else if (sizes.source == SizesSource::Host) rows = static_cast<u128>(sizes.total_rows);
        FUZZ_CHECK(static_cast<u128>(x.a_bytes) == rows * static_cast<u128>(desc.k) * in_b);
        FUZZ_CHECK(static_cast<u128>(x.d_bytes) == rows * static_cast<u128>(desc.n) * out_b);
        FUZZ_CHECK(static_cast<u128>(x.b_bytes) == static_cast<u128>(desc.num_experts) *
                                                       static_cast<u128>(desc.n) *
                                                       static_cast<u128>(desc.k) * in_b);
    }

    // --- execute arguments (pointers are never dereferenced) ---
    ExecuteArgs args;
    args.a = pick_ptr(fdp);
    args.b = pick_ptr(fdp);
    args.d = const_cast<void*>(fdp.ConsumeIntegralInRange<int>(0, 3) ? pick_ptr(fdp) : args.a);
    args.a_scale = fdp.ConsumeIntegralInRange<int>(0, 7) ? nullptr : static_cast<const float*>(pick_ptr(fdp));
    args.b_scale = fdp.ConsumeIntegralInRange<int>(0, 7) ? nullptr : static_cast<const float*>(pick_ptr(fdp));
    args.workspace = const_cast<void*>(pick_ptr(fdp));
    args.workspace_bytes = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<size_t>(0, 1 << 20)
                                             : fdp.ConsumeIntegral<size_t>();
    const size_t needed = fdp.ConsumeBool() ? 0 : fdp.ConsumeIntegralInRange<size_t>(0, 1 << 20);
    try {
        validate_execute_args(desc, sizes, args, needed);
        // Accepted: every rule holds.
        FUZZ_CHECK(sizes.source != SizesSource::None);
        const bool rows = may_compute_rows(desc, sizes);
        for (const void* t : {args.a, args.b, static_cast<const void*>(args.d)}) {
            FUZZ_CHECK(t != nullptr || !rows);
            FUZZ_CHECK(reinterpret_cast<uintptr_t>(t) % kTensorAlignment == 0);
        }
        for (const float* scale : {args.a_scale, args.b_scale}) {
            if (e4m3)
                FUZZ_CHECK(scale != nullptr &&
                           reinterpret_cast<uintptr_t>(scale) % kTensorAlignment == 0);
            else
                FUZZ_CHECK(scale == nullptr);
        }
        FUZZ_CHECK(!overlaps128(args.d, x.d_bytes, args.a, x.a_bytes));
        FUZZ_CHECK(!overlaps128(args.d, x.d_bytes, args.b, x.b_bytes));
        FUZZ_CHECK(args.workspace_bytes >= needed);
        if (needed > 0) {
            FUZZ_CHECK(args.workspace != nullptr &&
                       reinterpret_cast<uintptr_t>(args.workspace) % kWorkspaceAlignment == 0);
            FUZZ_CHECK(!overlaps128(args.workspace, args.workspace_bytes, args.d, x.d_bytes));
        }
    } catch (const Error& e) {
        check_error(e);
        const int s = e.status();
        FUZZ_CHECK(s == MOEGEMM_STATUS_INVALID_STATE || s == MOEGEMM_STATUS_INVALID_VALUE ||
                   s == MOEGEMM_STATUS_MISALIGNED || s == MOEGEMM_STATUS_WORKSPACE_TOO_SMALL);
    }

    // --- kernel selection on a fuzzed device ---
    DeviceCaps caps;
    caps.ordinal = desc.device;
    caps.cc_major = fdp.ConsumeBool() ? fdp.PickValueInArray<int>({7, 8, 9, 10, 12})
                                      : fdp.ConsumeIntegral<int>();
    caps.cc_minor = fdp.ConsumeBool() ? fdp.PickValueInArray<int>({0, 6, 9}) : fdp.ConsumeIntegral<int>();
    caps.sm_count = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int>(0, 200) : fdp.ConsumeIntegral<int>();
    caps.smem_per_block_optin = fdp.ConsumeBool() ? 232448 : fdp.ConsumeIntegral<size_t>();
    caps.l2_bytes = fdp.ConsumeBool() ? size_t{50} << 20 : fdp.ConsumeIntegral<size_t>();
    caps.name = fdp.ConsumeRandomLengthString(40);
    const ProblemSummary sum = summarize(desc, sizes);
    try {
        check_selection(select_kernel(sum, caps), sum, caps, desc);
        const std::string name = desc.force_kernel.empty() ? fdp.ConsumeRandomLengthString(48)
                                                           : desc.force_kernel;
        const Selection named = select_named_kernel(sum, caps, name);
        check_selection(named, sum, caps, desc);
        bool registered = false;
        for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v)
            registered |= name == v->name;
        if (!registered) FUZZ_CHECK(named.status == MOEGEMM_STATUS_INVALID_VALUE);
        if (named.status == MOEGEMM_STATUS_SUCCESS)
            FUZZ_CHECK(name == variant(named.kernel).name);
    } catch (const Error& e) {
        // The selectors report through Selection; a throw is an internal inconsistency.
        check_error(e);
        FUZZ_CHECK(!"select_kernel / select_named_kernel threw");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider fdp(data, size);
    try {
        if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) fuzz_schedule(fdp);
        else fuzz_problem(fdp);
    } catch (const Error& e) {
        check_error(e);
    }
    // Anything else (std::exception, ...) escapes and libFuzzer reports an uncaught exception.
    return 0;
}
