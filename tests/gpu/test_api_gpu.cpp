// [api]: host-visible bad input on live plans, the plan queries, and CUDA-graph capture.
//
// Test cases that pick backends explicitly honour MOEGEMM_TEST_BACKENDS (see
// support/gpu_harness.hpp); the others use AUTO and always run.
//
// Every failing call is checked for: the exact status; a last-error message that is non-empty,
// was set by this call (we set a different one just before), and names the argument; and
// that it changed nothing: D (poisoned before) keeps its poison, a failed
// set_expert_sizes leaves the previous sizes in force (executing afterwards still matches
// the reference computed for them).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>

#include "support/gpu_harness.hpp"

using namespace mgt;
using Catch::Matchers::Contains;

namespace {

// ------------------------------------------------------------------------------------------
// Checking failures
// ------------------------------------------------------------------------------------------

/// Makes the library set a known last-error message, so that the next check can tell that
/// the call under test set its own (successful calls do not clear the message).
std::string prime_last_error() {
    (void)(moegemm_problem_init)(nullptr);
    const char* m = moegemm_get_last_error_message();
    return m ? m : "";
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

bool ident_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

/// Case-insensitive: the message mentions one of the words. Words of one or two characters
/// (the arguments a, b, d) must appear as a whole token, not inside a longer identifier.
class MentionsAny : public Catch::MatcherBase<std::string> {
public:
    explicit MentionsAny(std::vector<std::string> words) : words_(std::move(words)) {}

    bool match(const std::string& text) const override {
        const std::string t = lower(text);
        for (const std::string& w0 : words_) {
            const std::string w = lower(w0);
            if (w.size() > 2) {
                if (t.find(w) != std::string::npos) return true;
                continue;
            }
            for (size_t at = t.find(w); at != std::string::npos; at = t.find(w, at + 1)) {
                const bool left = at == 0 || !ident_char(t[at - 1]);
                const bool right = at + w.size() >= t.size() || !ident_char(t[at + w.size()]);
                if (left && right) return true;
            }
        }
        return false;
    }

    std::string describe() const override {
        std::ostringstream os;
        os << "mentions one of";
        for (const auto& w : words_) os << " \"" << w << '"';
        return os.str();
    }

private:
    std::vector<std::string> words_;
};

void check_failure(const char* call, const Outcome& o, const std::string& primed,
                   moegemm_status_t expected, const std::vector<std::string>& words) {
    INFO(call << " -> " << o.str());
    CHECK(moegemm_status_name(o.status) == std::string(moegemm_status_name(expected)));
    CHECK_FALSE(o.message.empty());
    {
        INFO("the message is still the one set before the call: the failing call set none");
        CHECK(o.message != primed);
    }
    CHECK_THAT(o.message, MentionsAny(words));
}

/// Calls `call` (an expression of type moegemm_status_t) and checks it failed as expected.
#define EXPECT_FAILURE(call, expected, ...)                                                  \
    do {                                                                                     \
        const std::string mgt_primed_ = prime_last_error();                                  \
        const Outcome mgt_o_ = outcome((call));                                              \
        check_failure(#call, mgt_o_, mgt_primed_, (expected), __VA_ARGS__);                  \
    } while (0)

/// An enum value outside the enumerators (copied, to stay clear of out-of-range casts).
template <class Enum>
Enum bad_enum(int value) {
    static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized here");
    Enum e;
    std::memcpy(&e, &value, sizeof e);
    return e;
}

template <class T>
T* offset_bytes(T* p, std::ptrdiff_t bytes) {
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}

// ------------------------------------------------------------------------------------------
// A live plan with valid arguments, for one layout
// ------------------------------------------------------------------------------------------

// K > N, so that A and B are larger than D: a library that wrongly executes with D = A or
// D = B writes inside their allocations, not past them.
Geometry small_geometry(moegemm_layout_t layout) {
    Geometry g;
    g.layout = layout;
    g.weights = MOEGEMM_WEIGHTS_NK;
    g.experts = layout == MOEGEMM_LAYOUT_FIXED ? 3 : 4;
    g.n = 48;
    g.k = 64;
    g.max_rows = layout == MOEGEMM_LAYOUT_VARIABLE ? 40 : (layout == MOEGEMM_LAYOUT_MASKED ? 20 : 6);
    return g;
}

std::vector<int32_t> small_sizes(moegemm_layout_t layout) {
    if (layout == MOEGEMM_LAYOUT_FIXED) return {6, 6, 6};
    return {5, 0, 17, 9};  // VARIABLE: sum 31 of max_rows 40; MASKED: each <= 20
}

constexpr moegemm_dtype_t kIn = MOEGEMM_DTYPE_BF16;
constexpr moegemm_dtype_t kOut = MOEGEMM_DTYPE_BF16;

struct Live {
    Workload w;
    Plan plan;
    size_t need = 0;
    DeviceBuffer ws;
    OutputBuffer d;

    explicit Live(moegemm_layout_t layout, bool set_sizes = true,
                  moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO)
        : w(small_geometry(layout), kIn, small_sizes(layout), 1000u + layout),
          plan(make_problem(small_geometry(layout), kIn, kOut, backend)) {
        if (set_sizes && layout != MOEGEMM_LAYOUT_FIXED) {
            MGT_REQUIRE_OK(
                moegemm_plan_set_expert_sizes(plan.get(), w.sizes().data(), MOEGEMM_MEMORY_HOST));
        }
        need = plan.workspace_size();
        ws = DeviceBuffer(need + 512);  // room for a misaligned pointer, never NULL
        d = OutputBuffer(w.geometry().d_elems() * dtype_bytes(kOut));
    }

    const Geometry& g() const { return w.geometry(); }

    moegemm_status_t exec(const void* a, const void* b, void* dd, const float* as = nullptr,
                          const float* bs = nullptr) {
        return moegemm_execute(plan.get(), a, b, dd, as, bs, ws.get(), need, nullptr);
    }

    /// After a failed execute: nothing ran, D and the guards keep their poison.
    void expect_d_untouched() {
        MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
        MGT_CUDA_REQUIRE(cudaGetLastError());
        INFO("bytes of D (or its guards) written by a failed call");
        CHECK(d.unpoisoned() == 0);
    }

    /// After a failed set_expert_sizes: the plan still computes the original sizes.
    void expect_previous_sizes_in_force() {
        const RunResult r = execute_plan(plan, w, kOut);
        INFO("execute after the failed call -> " << r.error);
        REQUIRE(r.ok);
        const CompareReport rep = check_result(w, kOut, r.buffer);
        INFO("the plan must keep the sizes " << sizes_str(w.sizes()) << ": " << rep.summary());
        CHECK(rep.ok());
    }
};

}  // namespace

// ==========================================================================================
// moegemm_plan_set_expert_sizes
// ==========================================================================================

TEST_CASE("set_expert_sizes: NULL plan", "[api]") {
    const int32_t sizes[4] = {1, 2, 3, 4};
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(nullptr, sizes, MOEGEMM_MEMORY_HOST),
                   MOEGEMM_STATUS_INVALID_VALUE, {"plan"});
}

TEST_CASE("set_expert_sizes: NULL sizes keeps the previous sizes", "[api]") {
    const moegemm_layout_t layout = GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED);
    INFO(layout_name(layout));
    Live live(layout);
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), nullptr, MOEGEMM_MEMORY_HOST),
                   MOEGEMM_STATUS_INVALID_VALUE, {"sizes"});
    if (layout == MOEGEMM_LAYOUT_MASKED) {  // DEVICE is supported for MASKED: only NULL is wrong
        EXPECT_FAILURE(
            moegemm_plan_set_expert_sizes(live.plan.get(), nullptr, MOEGEMM_MEMORY_DEVICE),
            MOEGEMM_STATUS_INVALID_VALUE, {"sizes"});
    }
    live.expect_previous_sizes_in_force();
}

TEST_CASE("set_expert_sizes: `where` out of range", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);
    const int32_t other[4] = {1, 1, 1, 1};
    for (int value : {7, -1, 2}) {
        INFO("where = " << value);
        EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), other,
                                                     bad_enum<moegemm_memory_t>(value)),
                       MOEGEMM_STATUS_INVALID_VALUE, {"where", "memory"});
    }
    live.expect_previous_sizes_in_force();
}

TEST_CASE("set_expert_sizes: a negative host size", "[api]") {
    const moegemm_layout_t layout = GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED);
    INFO(layout_name(layout));
    const int32_t bad[4] = {5, -1, 3, 2};
    SECTION("on a plan with sizes: they stay in force") {
        Live live(layout);
        EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), bad, MOEGEMM_MEMORY_HOST),
                       MOEGEMM_STATUS_INVALID_VALUE, {"size", "negative"});
        live.expect_previous_sizes_in_force();
    }
    SECTION("on a plan without sizes: it still has none") {
        Live live(layout, /*set_sizes=*/false);
        EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), bad, MOEGEMM_MEMORY_HOST),
                       MOEGEMM_STATUS_INVALID_VALUE, {"size", "negative"});
        EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), live.d.d()),
                       MOEGEMM_STATUS_INVALID_STATE, {"size"});
        live.expect_d_untouched();
    }
}

TEST_CASE("set_expert_sizes: VARIABLE host sizes summing past max_rows", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);  // max_rows = 40
    const int32_t past[4] = {5, 0, 17, 19};                  // 41
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), past, MOEGEMM_MEMORY_HOST),
                   MOEGEMM_STATUS_INVALID_VALUE, {"size", "max_rows", "capacity"});
    // A sum that overflows int32 must not wrap around into an accepted value.
    const int32_t huge = std::numeric_limits<int32_t>::max();
    const int32_t wrap[4] = {huge, huge, 1, 1};
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), wrap, MOEGEMM_MEMORY_HOST),
                   MOEGEMM_STATUS_INVALID_VALUE, {"size", "max_rows", "capacity"});
    live.expect_previous_sizes_in_force();
    // The boundary, sum == max_rows, is valid.
    const int32_t full[4] = {5, 0, 17, 18};
    MGT_CHECK_OK(moegemm_plan_set_expert_sizes(live.plan.get(), full, MOEGEMM_MEMORY_HOST));
}

TEST_CASE("set_expert_sizes: MASKED host size past max_rows", "[api]") {
    Live live(MOEGEMM_LAYOUT_MASKED);  // max_rows = 20
    const int32_t past[4] = {5, 0, 21, 9};
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), past, MOEGEMM_MEMORY_HOST),
                   MOEGEMM_STATUS_INVALID_VALUE, {"size", "max_rows", "capacity"});
    live.expect_previous_sizes_in_force();
    const int32_t full[4] = {20, 20, 20, 20};  // each == max_rows: valid
    MGT_CHECK_OK(moegemm_plan_set_expert_sizes(live.plan.get(), full, MOEGEMM_MEMORY_HOST));
}

TEST_CASE("set_expert_sizes: a FIXED plan takes no sizes", "[api]") {
    Live live(MOEGEMM_LAYOUT_FIXED);
    const int32_t sizes[3] = {6, 6, 6};
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), sizes, MOEGEMM_MEMORY_HOST),
                   MOEGEMM_STATUS_INVALID_VALUE, {"fixed"});
    DeviceBuffer dev(sizeof sizes);
    dev.upload(sizes, sizeof sizes);
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(
                       live.plan.get(), static_cast<const int32_t*>(dev.get()), MOEGEMM_MEMORY_DEVICE),
                   MOEGEMM_STATUS_INVALID_VALUE, {"fixed"});
    live.expect_previous_sizes_in_force();
}

TEST_CASE("set_expert_sizes: DEVICE pointer not 4-byte aligned", "[api]") {
    Live live(MOEGEMM_LAYOUT_MASKED);  // MASKED: device sizes are supported on every backend
    DeviceBuffer dev(64);
    const std::vector<int32_t> sizes = {1, 2, 3, 4, 5};
    dev.upload(sizes.data(), sizes.size() * sizeof(int32_t));
    for (int off : {1, 2, 3}) {
        INFO("device pointer + " << off << " bytes");
        const auto* p = offset_bytes(static_cast<const int32_t*>(dev.get()), off);
        EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), p, MOEGEMM_MEMORY_DEVICE),
                       MOEGEMM_STATUS_MISALIGNED, {"size", "align"});
    }
    live.expect_previous_sizes_in_force();
    // 4-byte aligned but not 16-byte aligned is fine for sizes.
    MGT_CHECK_OK(moegemm_plan_set_expert_sizes(
        live.plan.get(), offset_bytes(static_cast<const int32_t*>(dev.get()), 4),
        MOEGEMM_MEMORY_DEVICE));
}

// ==========================================================================================
// moegemm_execute
// ==========================================================================================

TEST_CASE("execute: NULL plan", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);
    EXPECT_FAILURE(moegemm_execute(nullptr, live.w.a(), live.w.b(), live.d.d(), nullptr, nullptr,
                                   live.ws.get(), live.need, nullptr),
                   MOEGEMM_STATUS_INVALID_VALUE, {"plan"});
    live.expect_d_untouched();
}

TEST_CASE("execute: NULL a, b or d with rows to compute", "[api]") {
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    INFO(layout_name(layout));
    Live live(layout);
    EXPECT_FAILURE(live.exec(nullptr, live.w.b(), live.d.d()), MOEGEMM_STATUS_INVALID_VALUE, {"a"});
    EXPECT_FAILURE(live.exec(live.w.a(), nullptr, live.d.d()), MOEGEMM_STATUS_INVALID_VALUE, {"b"});
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), nullptr), MOEGEMM_STATUS_INVALID_VALUE, {"d"});
    live.expect_d_untouched();
}

TEST_CASE("execute: a, b or d not 16-byte aligned", "[api]") {
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    INFO(layout_name(layout));
    Live live(layout);
    for (std::ptrdiff_t off : {2, 8}) {  // +8: aligned for 8 bytes, still not for 16
        INFO("pointer + " << off << " bytes");
        EXPECT_FAILURE(live.exec(offset_bytes(live.w.a(), off), live.w.b(), live.d.d()),
                       MOEGEMM_STATUS_MISALIGNED, {"a"});
        EXPECT_FAILURE(live.exec(live.w.a(), offset_bytes(live.w.b(), off), live.d.d()),
                       MOEGEMM_STATUS_MISALIGNED, {"b"});
        EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), offset_bytes(live.d.d(), off)),
                       MOEGEMM_STATUS_MISALIGNED, {"d"});
    }
    live.expect_d_untouched();
}

// Both backends need a workspace: cuBLASLt for its algorithms, the native kernel for the
// tensor maps it makes at launch.
TEST_CASE("execute: workspace not 256-byte aligned", "[api]") {
    for (moegemm_backend_t backend : {MOEGEMM_BACKEND_CUBLASLT, MOEGEMM_BACKEND_NATIVE}) {
        Live live(MOEGEMM_LAYOUT_VARIABLE, true, backend);
        REQUIRE(live.need > 0);
        for (std::ptrdiff_t off : {16, 128}) {
            INFO("backend " << backend << ", workspace + " << off << " bytes");
            EXPECT_FAILURE(moegemm_execute(live.plan.get(), live.w.a(), live.w.b(), live.d.d(),
                                           nullptr, nullptr, offset_bytes(live.ws.get(), off),
                                           live.need, nullptr),
                           MOEGEMM_STATUS_MISALIGNED, {"workspace"});
        }
        live.expect_d_untouched();
    }
}

// DEVICE sizes are read by the kernels at every launch: in pageable host memory (HOST and
// DEVICE mixed up) the first launch would fault and take the CUDA context with it.
TEST_CASE("set_expert_sizes: DEVICE sizes in pageable host memory are refused", "[api]") {
    Live live(MOEGEMM_LAYOUT_MASKED);
    alignas(16) static int32_t host_sizes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT_FAILURE(moegemm_plan_set_expert_sizes(live.plan.get(), host_sizes,
                                                 MOEGEMM_MEMORY_DEVICE),
                   MOEGEMM_STATUS_INVALID_VALUE, {"sizes = ", "pageable host memory"});
    live.expect_previous_sizes_in_force();
    // Pinned host memory is readable by the GPU: accepted.
    int32_t* pinned = nullptr;
    MGT_CUDA_REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof host_sizes));
    std::unique_ptr<int32_t, decltype(&cudaFreeHost)> owner(pinned, &cudaFreeHost);
    std::copy(std::begin(host_sizes), std::end(host_sizes), pinned);
    MGT_CHECK_OK(moegemm_plan_set_expert_sizes(live.plan.get(), pinned, MOEGEMM_MEMORY_DEVICE));
}

// The buffers the kernels write must be memory the plan's device can write: pageable host
// memory would fault inside the kernel (and take the CUDA context with it).
TEST_CASE("execute: a workspace or D in pageable host memory is refused", "[api]") {
    for (moegemm_backend_t backend : {MOEGEMM_BACKEND_CUBLASLT, MOEGEMM_BACKEND_NATIVE}) {
        INFO("backend " << backend);
        Live live(MOEGEMM_LAYOUT_VARIABLE, true, backend);
        const size_t bytes = std::max(live.need, live.d.d_bytes()) + 256;
        std::unique_ptr<void, decltype(&std::free)> host(std::aligned_alloc(256, bytes + 256),
                                                         &std::free);
        REQUIRE(host != nullptr);
        EXPECT_FAILURE(moegemm_execute(live.plan.get(), live.w.a(), live.w.b(), live.d.d(),
                                       nullptr, nullptr, host.get(), live.need, nullptr),
                       MOEGEMM_STATUS_INVALID_VALUE, {"workspace", "pageable host memory"});
        EXPECT_FAILURE(moegemm_execute(live.plan.get(), live.w.a(), live.w.b(), host.get(),
                                       nullptr, nullptr, live.ws.get(), live.need, nullptr),
                       MOEGEMM_STATUS_INVALID_VALUE, {"d = ", "pageable host memory"});
        live.expect_d_untouched();
    }
}

TEST_CASE("execute: workspace smaller than the plan needs", "[api]") {
    for (moegemm_backend_t backend : {MOEGEMM_BACKEND_CUBLASLT, MOEGEMM_BACKEND_NATIVE}) {
        INFO("backend " << backend);
        Live live(MOEGEMM_LAYOUT_VARIABLE, true, backend);
        REQUIRE(live.need > 0);
        EXPECT_FAILURE(moegemm_execute(live.plan.get(), live.w.a(), live.w.b(), live.d.d(), nullptr,
                                       nullptr, live.ws.get(), live.need - 1, nullptr),
                       MOEGEMM_STATUS_WORKSPACE_TOO_SMALL, {"workspace"});
        EXPECT_FAILURE(moegemm_execute(live.plan.get(), live.w.a(), live.w.b(), live.d.d(), nullptr,
                                       nullptr, nullptr, 0, nullptr),
                       MOEGEMM_STATUS_WORKSPACE_TOO_SMALL, {"workspace"});
        live.expect_d_untouched();
    }
}

TEST_CASE("execute: scales given for 16-bit inputs", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);
    DeviceBuffer scales(256);
    const float one[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    scales.upload(one, sizeof one);
    const auto* s = static_cast<const float*>(scales.get());
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), live.d.d(), s, nullptr),
                   MOEGEMM_STATUS_INVALID_VALUE, {"scale"});
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), live.d.d(), nullptr, s),
                   MOEGEMM_STATUS_INVALID_VALUE, {"scale"});
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), live.d.d(), s, s),
                   MOEGEMM_STATUS_INVALID_VALUE, {"scale"});
    live.expect_d_untouched();
}

TEST_CASE("execute: D overlapping A or B", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);
    void* a = const_cast<void*>(live.w.a());
    void* b = const_cast<void*>(live.w.b());
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), a), MOEGEMM_STATUS_INVALID_VALUE,
                   {"overlap", "d"});
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), offset_bytes(a, 256)),
                   MOEGEMM_STATUS_INVALID_VALUE, {"overlap", "d"});
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), b), MOEGEMM_STATUS_INVALID_VALUE,
                   {"overlap", "d"});
    live.expect_d_untouched();
    live.w.check_inputs_unchanged();  // A and B were the would-be D: nothing written there
}

TEST_CASE("execute: D right after A (adjacent, not overlapping) is accepted", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);
    const Geometry& g = live.g();
    const size_t a_bytes = g.a_elems() * dtype_bytes(kIn);
    const size_t d_bytes = g.d_elems() * dtype_bytes(kOut);
    REQUIRE(a_bytes % 16 == 0);
    DeviceBuffer both(a_bytes + d_bytes + kGuardBytes);
    both.fill(kPoisonByte);
    MGT_CUDA_REQUIRE(cudaMemcpy(both.get(), live.w.a(), a_bytes, cudaMemcpyDeviceToDevice));
    void* d = both.bytes_ptr() + a_bytes;
    const Outcome o = outcome(moegemm_execute(live.plan.get(), both.get(), live.w.b(), d, nullptr,
                                              nullptr, live.ws.get(), live.need, nullptr));
    INFO("execute -> " << o.str());
    REQUIRE(o.status == MOEGEMM_STATUS_SUCCESS);
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::vector<uint8_t> all = both.download();
    // Rebuild the [guard][D][guard] buffer compare_output expects: the front guard is A here,
    // so it is replaced by poison, and A is checked separately.
    std::vector<uint8_t> buf(kGuardBytes + (all.size() - a_bytes), kPoisonByte);
    std::memcpy(buf.data() + kGuardBytes, all.data() + a_bytes, all.size() - a_bytes);
    {
        const CompareReport rep = check_result(live.w, kOut, buf);
        INFO(rep.summary());
        CHECK(rep.ok());
    }
    std::vector<uint8_t> a_before(a_bytes);
    MGT_CUDA_REQUIRE(cudaMemcpy(a_before.data(), live.w.a(), a_bytes, cudaMemcpyDeviceToHost));
    INFO("A (just before D) changed");
    CHECK(std::memcmp(a_before.data(), all.data(), a_bytes) == 0);
}

TEST_CASE("execute: VARIABLE or MASKED plan before its sizes were set", "[api]") {
    const moegemm_layout_t layout = GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED);
    INFO(layout_name(layout));
    Live live(layout, /*set_sizes=*/false);
    EXPECT_FAILURE(live.exec(live.w.a(), live.w.b(), live.d.d()), MOEGEMM_STATUS_INVALID_STATE,
                   {"size"});
    live.expect_d_untouched();
}

TEST_CASE("execute: all-zero host sizes with NULL a, b and d succeed", "[api]") {
    const moegemm_layout_t layout = GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED);
    INFO(layout_name(layout));
    Live live(layout, /*set_sizes=*/false);
    const int32_t zeros[4] = {0, 0, 0, 0};
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(live.plan.get(), zeros, MOEGEMM_MEMORY_HOST));
    MGT_CHECK_OK(live.exec(nullptr, nullptr, nullptr));
    // And with real pointers nothing is written for VARIABLE (MASKED rows are unspecified).
    MGT_CHECK_OK(live.exec(live.w.a(), live.w.b(), live.d.d()));
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    MGT_CUDA_REQUIRE(cudaGetLastError());
    if (layout == MOEGEMM_LAYOUT_VARIABLE) CHECK(live.d.unpoisoned() == 0);
}

// ==========================================================================================
// Plans: describe, workspace size, destroy, create
// ==========================================================================================

TEST_CASE("describe: NULL plan, NULL buf, len 0", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);
    char buf[MOEGEMM_DESCRIBE_MAX];
    EXPECT_FAILURE(moegemm_plan_describe(nullptr, buf, sizeof buf), MOEGEMM_STATUS_INVALID_VALUE,
                   {"plan"});
    EXPECT_FAILURE(moegemm_plan_describe(live.plan.get(), nullptr, sizeof buf),
                   MOEGEMM_STATUS_INVALID_VALUE, {"buf"});
    buf[0] = '#';
    EXPECT_FAILURE(moegemm_plan_describe(live.plan.get(), buf, 0), MOEGEMM_STATUS_INVALID_VALUE,
                   {"len"});
    CHECK(buf[0] == '#');  // len 0: not even a NUL may be written
}

TEST_CASE("describe: an 8-byte buffer gets a truncated, NUL-terminated prefix", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE);
    const std::string full = live.plan.describe();
    INFO("full description: \"" << full << '"');
    CHECK(full.size() > 7);
    char small[16];
    std::memset(small, 'x', sizeof small);
    MGT_REQUIRE_OK(moegemm_plan_describe(live.plan.get(), small, 8));
    const void* nul = std::memchr(small, '\0', 8);
    REQUIRE(nul != nullptr);
    CHECK(std::string(small) == full.substr(0, std::min<size_t>(7, full.size())));
    for (size_t i = 8; i < sizeof small; ++i) CHECK(small[i] == 'x');  // nothing past len
    char one[1] = {'x'};
    MGT_REQUIRE_OK(moegemm_plan_describe(live.plan.get(), one, 1));
    CHECK(one[0] == '\0');
}

TEST_CASE("describe: names the cuBLASLt backend in this build", "[api]") {
    const moegemm_backend_t backend = GENERATE(MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT);
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    if (!backend_enabled(backend)) return;  // MOEGEMM_TEST_BACKENDS (support/gpu_harness.hpp)
    INFO(backend_name(backend) << " " << layout_name(layout));
    Plan plan(make_problem(small_geometry(layout), kIn, kOut, backend));
    const std::string text = plan.describe();
    INFO("description: \"" << text << '"');
    CHECK(text.size() < MOEGEMM_DESCRIBE_MAX);
    CHECK(text.find('\n') == std::string::npos);  // one line
    if (backend == MOEGEMM_BACKEND_CUBLASLT || device_cc() != 90) {
        CHECK_THAT(text, Contains("cublaslt", Catch::CaseSensitive::No));
    } else {
        // AUTO on sm_90 may pick a native kernel once that backend exists; it must say which.
        CHECK_THAT(text, MentionsAny({"cublaslt", "native"}));
    }
}

TEST_CASE("get_workspace_size: NULL arguments; the size never changes", "[api]") {
    Live live(MOEGEMM_LAYOUT_VARIABLE, /*set_sizes=*/false);
    EXPECT_FAILURE(moegemm_plan_get_workspace_size(live.plan.get(), nullptr),
                   MOEGEMM_STATUS_INVALID_VALUE, {"bytes", "size", "null"});
    size_t bytes = 12345;
    EXPECT_FAILURE(moegemm_plan_get_workspace_size(nullptr, &bytes), MOEGEMM_STATUS_INVALID_VALUE,
                   {"plan"});
    CHECK(bytes == 12345);
    // Fixed at creation: setting sizes does not change it.
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(live.plan.get(), live.w.sizes().data(),
                                                 MOEGEMM_MEMORY_HOST));
    CHECK(live.plan.workspace_size() == live.need);
    const int32_t other[4] = {40, 0, 0, 0};
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(live.plan.get(), other, MOEGEMM_MEMORY_HOST));
    CHECK(live.plan.workspace_size() == live.need);
}

TEST_CASE("destroy: NULL is a no-op", "[api]") {
    CHECK(moegemm_plan_destroy(nullptr) == MOEGEMM_STATUS_SUCCESS);
}

TEST_CASE("plan_create: device ordinal out of range", "[api]") {
    int count = 0;
    MGT_CUDA_REQUIRE(cudaGetDeviceCount(&count));
    moegemm_problem_t p = make_problem(small_geometry(MOEGEMM_LAYOUT_VARIABLE), kIn, kOut);
    for (int dev : {count, count + 7, -1}) {
        INFO("device = " << dev << " of " << count);
        p.device = dev;
        moegemm_plan_t out = reinterpret_cast<moegemm_plan_t>(uintptr_t{0x1234});
        EXPECT_FAILURE(moegemm_plan_create(&p, &out), MOEGEMM_STATUS_INVALID_VALUE, {"device"});
        CHECK(out == reinterpret_cast<moegemm_plan_t>(uintptr_t{0x1234}));  // untouched
    }
}

TEST_CASE("plan_create: backend NATIVE is not in this build", "[api]") {
    const moegemm_problem_t p = [] {
        moegemm_problem_t q = make_problem(small_geometry(MOEGEMM_LAYOUT_VARIABLE), kIn, kOut);
        q.backend = MOEGEMM_BACKEND_NATIVE;
        return q;
    }();
    const std::string primed = prime_last_error();
    moegemm_plan_t out = reinterpret_cast<moegemm_plan_t>(uintptr_t{0x1234});
    const Outcome o = outcome(moegemm_plan_create(&p, &out));
    if (o.status == MOEGEMM_STATUS_SUCCESS) {
        // Only acceptable once the native sm_90a backend exists, on an sm_90 device; and then
        // the plan must really be native, not a silent fallback.
        const moegemm_plan_t plan = out;
        char buf[MOEGEMM_DESCRIBE_MAX];
        MGT_REQUIRE_OK(moegemm_plan_describe(plan, buf, sizeof buf));
        INFO("NATIVE plan created on sm_" << device_cc() << ": \"" << buf << '"');
        CHECK(device_cc() == 90);
        CHECK_THAT(std::string(buf), !Contains("cublaslt", Catch::CaseSensitive::No));
        CHECK(moegemm_plan_destroy(plan) == MOEGEMM_STATUS_SUCCESS);
        return;
    }
    check_failure("moegemm_plan_create(backend NATIVE)", o, primed, MOEGEMM_STATUS_NOT_SUPPORTED,
                  {"native", "backend"});
    CHECK(out == reinterpret_cast<moegemm_plan_t>(uintptr_t{0x1234}));
}

TEST_CASE("version: the runtime library matches this header", "[api]") {
    CHECK(moegemm_get_version() == MOEGEMM_VERSION);
    std::ostringstream os;
    os << MOEGEMM_VERSION_MAJOR << '.' << MOEGEMM_VERSION_MINOR << '.' << MOEGEMM_VERSION_PATCH;
    CHECK(std::string(moegemm_get_version_string()) == os.str());
}

// ==========================================================================================
// CUDA graphs
// ==========================================================================================

TEST_CASE("CUDA graph: MASKED with device sizes, captured once, replayed with new sizes",
          "[api]") {
    const moegemm_backend_t backend = GENERATE(MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT);
    const moegemm_dtype_t out = GENERATE(MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F32);
    if (!backend_enabled(backend)) return;  // MOEGEMM_TEST_BACKENDS (support/gpu_harness.hpp)
    INFO("backend " << backend_name(backend) << " out " << dtype_name(out));
    Geometry g;
    g.layout = MOEGEMM_LAYOUT_MASKED;
    g.experts = 4;
    g.n = 64;
    g.k = 96;
    g.max_rows = 50;
    const Workload w(g, kIn, {50, 50, 50, 50}, 777);
    const std::vector<std::vector<int32_t>> replays = {
        {13, 0, 50, 7}, {50, 1, 0, 33}, {0, 0, 2, 0}};

    Plan plan(make_problem(g, kIn, out, backend));
    DeviceBuffer dev_sizes(g.experts * sizeof(int32_t));
    dev_sizes.upload(replays[0].data(), g.experts * sizeof(int32_t));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
        plan.get(), static_cast<const int32_t*>(dev_sizes.get()), MOEGEMM_MEMORY_DEVICE));
    INFO("plan: " << plan.describe());
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * dtype_bytes(out));
    Stream s;
    Graph graph;
    capture_execute(graph, s.get(), plan.get(), w, d.d(), ws.get(), ws_bytes);
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(s.get()));
    CHECK(d.unpoisoned() == 0);  // capturing runs nothing

    for (size_t i = 0; i < replays.size(); ++i) {
        INFO("replay " << i << " with device sizes " << sizes_str(replays[i]));
        dev_sizes.upload(replays[i].data(), g.experts * sizeof(int32_t));
        d.poison();  // every valid row must be written by this replay
        MGT_CUDA_REQUIRE(cudaGraphLaunch(graph.exec, s.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(s.get()));
        const CompareReport rep = check_result(w, out, replays[i], d.download());
        INFO(rep.summary());
        CHECK(rep.ok());
    }
}

TEST_CASE("CUDA graph: host sizes are baked into the capture", "[api]") {
    // The header: host sizes are baked into the work execute enqueues, so a graph captured
    // with sizes S1 still computes S1 after the plan gets S2.
    const moegemm_layout_t layout = GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED);
    INFO(layout_name(layout));
    Geometry g;
    g.layout = layout;
    g.experts = 3;
    g.n = 40;
    g.k = 72;
    g.max_rows = layout == MOEGEMM_LAYOUT_VARIABLE ? 60 : 30;
    const std::vector<int32_t> s1 = {7, 0, 23};
    const std::vector<int32_t> s2 = {30, 19, 1};
    const Workload w(g, kIn, s1, 4711);

    Plan plan(make_problem(g, kIn, kOut));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), s1.data(), MOEGEMM_MEMORY_HOST));
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * dtype_bytes(kOut));
    Stream s;
    Graph graph;
    capture_execute(graph, s.get(), plan.get(), w, d.d(), ws.get(), ws_bytes);
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), s2.data(), MOEGEMM_MEMORY_HOST));
    for (int i = 0; i < 2; ++i) {
        INFO("replay " << i << " after the plan's sizes became " << sizes_str(s2));
        d.poison();
        MGT_CUDA_REQUIRE(cudaGraphLaunch(graph.exec, s.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(s.get()));
        const CompareReport rep = check_result(w, kOut, d.download());
        INFO("must still compute the captured sizes " << sizes_str(s1) << ": " << rep.summary());
        CHECK(rep.ok());
    }
}
