#include "support/gpu_harness.hpp"

#include "support/gpu_case.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

namespace mgt {

std::string Outcome::str() const {
    std::string s = moegemm_status_name(status);
    s += ": \"";
    s += message;
    s += '"';
    return s;
}

Outcome outcome(moegemm_status_t status) {
    Outcome o;
    o.status = status;
    const char* msg = moegemm_get_last_error_message();
    o.message = msg ? msg : "(NULL message pointer)";
    return o;
}

// ------------------------------------------------------------------------------------------
// RAII
// ------------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) MGT_CUDA_REQUIRE(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) (void)cudaFree(ptr_);  // no assertion in a destructor
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        if (ptr_) (void)cudaFree(ptr_);
        ptr_ = o.ptr_;
        bytes_ = o.bytes_;
        o.ptr_ = nullptr;
        o.bytes_ = 0;
    }
    return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
    REQUIRE(offset + bytes <= bytes_);
    if (bytes)
        MGT_CUDA_REQUIRE(cudaMemcpy(bytes_ptr() + offset, host, bytes, cudaMemcpyHostToDevice));
}

std::vector<uint8_t> DeviceBuffer::download() const {
    std::vector<uint8_t> out(bytes_);
    if (bytes_) MGT_CUDA_REQUIRE(cudaMemcpy(out.data(), ptr_, bytes_, cudaMemcpyDeviceToHost));
    return out;
}

void DeviceBuffer::fill(uint8_t byte) {
    if (bytes_) {
        MGT_CUDA_REQUIRE(cudaMemset(ptr_, byte, bytes_));
        MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    }
}

OutputBuffer::OutputBuffer(size_t d_bytes) : buf_(d_bytes + 2 * kGuardBytes), d_bytes_(d_bytes) {
    poison();
}

void OutputBuffer::poison() { buf_.fill(kPoisonByte); }

int64_t OutputBuffer::unpoisoned() const {
    const std::vector<uint8_t> bytes = download();
    return count_unpoisoned(bytes, 0, bytes.size());
}

Stream::Stream() { MGT_CUDA_REQUIRE(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }

Stream::~Stream() {
    if (s_) {
        (void)cudaStreamSynchronize(s_);
        (void)cudaStreamDestroy(s_);
    }
}

Plan::Plan(const moegemm_problem_t& problem) {
    const Outcome o = try_create(problem);
    INFO("moegemm_plan_create -> " << o.str());
    REQUIRE(o.status == MOEGEMM_STATUS_SUCCESS);
    REQUIRE(p_ != nullptr);
}

namespace {
thread_local moegemm::PlanOptions thread_plan_options;
}  // namespace

ScopedPlanOption::ScopedPlanOption(const char* name, bool value) : saved_(thread_plan_options) {
    INFO("plan option " << name);
    REQUIRE(moegemm::set_plan_option(thread_plan_options, name, value));
}

ScopedPlanOption::~ScopedPlanOption() { thread_plan_options = saved_; }

moegemm_status_t create_plan(const moegemm_problem_t& problem, moegemm_plan_t* out) {
    return moegemm::testing::plan_create_with_options(&problem, thread_plan_options, out);
}

moegemm_status_t create_moe_plan(const moegemm_moe_problem_t& problem, moegemm_moe_plan_t* out) {
    return moegemm::testing::moe_plan_create_with_options(&problem, thread_plan_options, out);
}

Plan::~Plan() {
    if (p_) (void)moegemm_plan_destroy(p_);
}

Outcome Plan::try_create(const moegemm_problem_t& problem) {
    moegemm_plan_t p = nullptr;
    const Outcome o = outcome(create_plan(problem, &p));
    if (o.status == MOEGEMM_STATUS_SUCCESS) {
        if (p_) (void)moegemm_plan_destroy(p_);
        p_ = p;
    }
    return o;
}

size_t Plan::workspace_size() const {
    size_t bytes = 0;
    MGT_REQUIRE_OK(moegemm_plan_get_workspace_size(p_, &bytes));
    return bytes;
}

std::string Plan::describe() const {
    char buf[MOEGEMM_DESCRIBE_MAX];
    std::memset(buf, 'x', sizeof buf);
    MGT_REQUIRE_OK(moegemm_plan_describe(p_, buf, sizeof buf));
    const void* nul = std::memchr(buf, '\0', sizeof buf);
    INFO("moegemm_plan_describe must NUL-terminate within MOEGEMM_DESCRIBE_MAX bytes");
    REQUIRE(nul != nullptr);
    return std::string(buf);
}

// ------------------------------------------------------------------------------------------
// Problems and workloads
// ------------------------------------------------------------------------------------------

moegemm_problem_t make_problem(const Geometry& g, moegemm_dtype_t in, moegemm_dtype_t out,
                               moegemm_backend_t backend) {
    moegemm_problem_t p;
    std::memset(&p, 0xAB, sizeof p);  // moegemm_problem_init must set every field
    MGT_REQUIRE_OK(moegemm_problem_init(&p));
    REQUIRE(p.struct_size == sizeof(moegemm_problem_t));
    p.layout = g.layout;
    p.num_experts = g.experts;
    p.n = g.n;
    p.k = g.k;
    p.max_rows = g.max_rows;
    p.a_type = in;
    p.b_type = in;
    p.d_type = out;
    p.weight_layout = g.weights;
    p.backend = backend;
    int dev = 0;
    MGT_CUDA_REQUIRE(cudaGetDevice(&dev));
    p.device = dev;
    return p;
}

Workload::Workload(const Geometry& g, moegemm_dtype_t in, std::vector<int32_t> sizes,
                   uint32_t seed)
    : g_(g), in_(in), sizes_(std::move(sizes)) {
    if (g.layout == MOEGEMM_LAYOUT_FIXED) {
        // FIXED takes no sizes: every slab row is valid. Keep them for messages.
        sizes_.assign(static_cast<size_t>(g.experts), static_cast<int32_t>(g.max_rows));
    }
    REQUIRE(sizes_.size() == static_cast<size_t>(g.experts));
    // Every row of A is random, including rows that no expert owns (VARIABLE past the sum,
    // MASKED past M_e): a kernel that reads them must not be able to "pass" on zeros.
    // Generated on the GPU: a host generator of the larger cases costs seconds per workload.
    a_seed_ = (static_cast<uint64_t>(seed) << 1) | 0;
    b_seed_ = (static_cast<uint64_t>(seed) << 1) | 1;
    a_dev_ = DeviceBuffer(a_bytes() + kInputSlack);
    b_dev_ = DeviceBuffer(b_bytes() + kInputSlack);
    // The slack too is written, so that no kernel reading past the end (within the slack)
    // reads uninitialized memory (compute-sanitizer initcheck).
    a_dev_.fill(0);
    b_dev_.fill(0);
    MGT_CUDA_REQUIRE(gpuref::fill_random(a_dev_.get(), g.a_elems(), in, a_seed_, nullptr));
    MGT_CUDA_REQUIRE(gpuref::fill_random(b_dev_.get(), g.b_elems(), in, b_seed_, nullptr));
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
}

std::string Workload::str() const {
    std::ostringstream os;
    os << g_.str() << " in=" << dtype_name(in_);
    if (g_.layout != MOEGEMM_LAYOUT_FIXED) os << " sizes=" << sizes_str(sizes_);
    return os.str();
}

void Workload::check_inputs_unchanged() const {
    DeviceBuffer count(sizeof(unsigned long long));
    count.fill(0);
    auto* mismatches = static_cast<unsigned long long*>(count.get());
    MGT_CUDA_REQUIRE(gpuref::count_random_mismatches(a_dev_.get(), g_.a_elems(), in_, a_seed_,
                                                     mismatches, nullptr));
    MGT_CUDA_REQUIRE(gpuref::count_random_mismatches(b_dev_.get(), g_.b_elems(), in_, b_seed_,
                                                     mismatches, nullptr));
    unsigned long long changed = 0;
    const std::vector<uint8_t> bytes = count.download();
    std::memcpy(&changed, bytes.data(), sizeof(changed));
    INFO(str());
    CHECK(changed == 0);
}

const char* sizes_from_name(SizesFrom s) {
    switch (s) {
        case SizesFrom::None: return "none";
        case SizesFrom::Host: return "host";
        case SizesFrom::Device: return "device";
    }
    return "?";
}

std::string RunOptions::str() const {
    std::ostringstream os;
    os << "backend=" << backend_name(backend) << " out=" << dtype_name(out)
       << " sizes_from=" << sizes_from_name(sizes_from)
       << (stream ? " stream=created" : " stream=legacy default")
       << (force_kernel.empty() ? "" : " force_kernel=" + force_kernel);
    if (expected_rows) os << " expected_rows=" << expected_rows;
    return os.str();
}

RunResult run_once(const Workload& w, const RunOptions& opt) {
    RunResult res;
    const Geometry& g = w.geometry();
    Plan plan;
    moegemm_problem_t problem = make_problem(g, w.in_type(), opt.out, opt.backend);
    problem.force_kernel = opt.force_kernel.empty() ? nullptr : opt.force_kernel.c_str();
    problem.expected_rows = opt.expected_rows;
    Outcome o = plan.try_create(problem);
    if (o.status != MOEGEMM_STATUS_SUCCESS) {
        res.error = "moegemm_plan_create -> " + o.str();
        return res;
    }
    DeviceBuffer dev_sizes;
    if (opt.sizes_from != SizesFrom::None) {
        const int32_t* ptr = w.sizes().data();
        moegemm_memory_t where = MOEGEMM_MEMORY_HOST;
        if (opt.sizes_from == SizesFrom::Device) {
            dev_sizes = DeviceBuffer(w.sizes().size() * sizeof(int32_t));
            dev_sizes.upload(w.sizes().data(), w.sizes().size() * sizeof(int32_t));
            ptr = static_cast<const int32_t*>(dev_sizes.get());
            where = MOEGEMM_MEMORY_DEVICE;
        }
        o = outcome(moegemm_plan_set_expert_sizes(plan.get(), ptr, where));
        if (o.status != MOEGEMM_STATUS_SUCCESS) {
            res.error = std::string("moegemm_plan_set_expert_sizes(") +
                        sizes_from_name(opt.sizes_from) + ") -> " + o.str();
            return res;
        }
    }

    // Described once the sizes are set: with host sizes the plan picks its kernel from them.
    const std::string description = plan.describe();
    RunResult ran = execute_plan(plan, w, opt.out, opt.stream);
    ran.description = description;
    return ran;
}

RunResult execute_plan(const Plan& plan, const Workload& w, moegemm_dtype_t out,
                       cudaStream_t stream) {
    RunResult res;
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    // Garbage, not never-written memory: a fresh allocation here often gets the address of
    // the previous call's, which the plan remembers as a workspace it already cleared the
    // ticket word of (src/backends/native.cpp), and initcheck would report the kernel's read
    // of it. Garbage is what the library must cope with anyway.
    if (ws_bytes > 0) MGT_CUDA_REQUIRE(cudaMemset(ws.get(), 0xA5, ws_bytes));
    OutputBuffer d(w.geometry().d_elems() * dtype_bytes(out));
    const Outcome o = outcome(moegemm_execute(plan.get(), w.a(), w.b(), d.d(), nullptr, nullptr,
                                              ws.get(), ws_bytes, stream));
    if (o.status != MOEGEMM_STATUS_SUCCESS) {
        res.error = "moegemm_execute -> " + o.str();
        return res;
    }
    if (stream) MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream));
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    MGT_CUDA_REQUIRE(cudaGetLastError());
    res.buffer = d.download();
    uint32_t* word = nullptr;
    MGT_REQUIRE_OK(moegemm_plan_get_status_word(plan.get(), &word));
    MGT_CUDA_REQUIRE(cudaMemcpy(&res.status_word, word, sizeof res.status_word,
                                cudaMemcpyDeviceToHost));
    res.ok = true;
    return res;
}

bool valid_sizes(const Geometry& g, const std::vector<int32_t>& sizes) {
    if (sizes.size() != static_cast<size_t>(g.experts)) return false;
    int64_t sum = 0;
    for (const int32_t m : sizes) {
        if (m < 0 || (g.layout != MOEGEMM_LAYOUT_VARIABLE && m > g.max_rows)) return false;
        sum += m;
    }
    return g.layout != MOEGEMM_LAYOUT_VARIABLE || sum <= g.max_rows;
}

CompareReport check_result(const Workload& w, moegemm_dtype_t out,
                           const std::vector<int32_t>& sizes, const std::vector<uint8_t>& buffer) {
    const Geometry& g = w.geometry();
    {
        INFO("check_result " << sizes_str(sizes) << ": test bug, sizes must be valid");
        REQUIRE(valid_sizes(g, sizes));
    }
    const size_t d_bytes = g.d_elems() * dtype_bytes(out);
    REQUIRE(buffer.size() == d_bytes + 2 * kGuardBytes);
    // The downloaded buffer goes back to the GPU, where the oracle recomputes every valid
    // element from the workload's A and B.
    DeviceBuffer copy(buffer.size());
    copy.upload(buffer.data(), buffer.size());
    const uint8_t* bytes = copy.bytes_ptr();
    DeviceChecker checker;
    checker.begin(nullptr);
    checker.output(g, w.in_type(), out, w.a(), w.b(), bytes + kGuardBytes, sizes, nullptr);
    checker.bytes("guard before D", bytes, kGuardBytes, kPoisonByte, nullptr);
    checker.bytes("guard after D", bytes + kGuardBytes + d_bytes, kGuardBytes, kPoisonByte,
                  nullptr);
    const CheckReport found = checker.finish(nullptr);
    CompareReport rep;
    rep.checked = found.checked;
    rep.bad_values = found.bad_values;
    rep.bad_untouched = found.bad_untouched;
    rep.worst_ratio = found.worst_ratio;
    rep.global_diff = found.global_diff;
    rep.global_diff_bad = found.global_bad || found.bad_tiles > 0;  // whole output or one tile
    rep.samples = found.samples;
    for (const auto& [name, count] : found.changed) {
        rep.bad_guard += count;
        rep.samples.push_back(name + ": " + std::to_string(count) + " bytes changed");
    }
    return rep;
}

CompareReport check_result(const Workload& w, moegemm_dtype_t out,
                           const std::vector<uint8_t>& buffer) {
    return check_result(w, out, w.sizes(), buffer);
}

int device_cc() {
    int dev = 0, major = 0, minor = 0;
    MGT_CUDA_REQUIRE(cudaGetDevice(&dev));
    MGT_CUDA_REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    MGT_CUDA_REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major * 10 + minor;
}

// ------------------------------------------------------------------------------------------
// Backend filter
// ------------------------------------------------------------------------------------------

bool parse_backend_filter(const char* text, unsigned* mask, std::string* error) {
    const unsigned all = (1u << MOEGEMM_BACKEND_AUTO) | (1u << MOEGEMM_BACKEND_NATIVE) |
                         (1u << MOEGEMM_BACKEND_CUBLASLT);
    std::string t;
    for (const char* c = text ? text : ""; *c; ++c) {
        if (!std::isspace(static_cast<unsigned char>(*c)))
            t += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    }
    if (t.empty()) {
        *mask = all;
        return true;
    }
    unsigned m = 0;
    size_t at = 0;
    while (at <= t.size()) {
        const size_t comma = std::min(t.find(',', at), t.size());
        const std::string name = t.substr(at, comma - at);
        if (name == "auto") m |= 1u << MOEGEMM_BACKEND_AUTO;
        else if (name == "native") m |= 1u << MOEGEMM_BACKEND_NATIVE;
        else if (name == "cublaslt") m |= 1u << MOEGEMM_BACKEND_CUBLASLT;
        else if (!name.empty()) {
            if (error)
                *error = "MOEGEMM_TEST_BACKENDS=\"" + std::string(text) + "\": unknown backend \"" +
                         name + "\" (use a comma list of auto, cublaslt, native)";
            return false;
        }
        at = comma + 1;
    }
    if (m == 0) {
        if (error)
            *error = "MOEGEMM_TEST_BACKENDS=\"" + std::string(text) + "\" names no backend";
        return false;
    }
    *mask = m;
    return true;
}

namespace {
unsigned backend_mask() {
    static const unsigned mask = [] {
        unsigned m = 0;
        std::string error;
        if (!parse_backend_filter(std::getenv("MOEGEMM_TEST_BACKENDS"), &m, &error)) {
            // gpu_main rejects a bad filter before any test runs; be strict here too.
            FAIL(error);
        }
        return m;
    }();
    return mask;
}
}  // namespace

bool backend_enabled(moegemm_backend_t backend) {
    return (backend_mask() >> static_cast<unsigned>(backend)) & 1u;
}

std::string backend_filter_str() {
    const char* text = std::getenv("MOEGEMM_TEST_BACKENDS");
    if (!text || !*text) return "all backends";
    return std::string("MOEGEMM_TEST_BACKENDS=") + text;
}

// ------------------------------------------------------------------------------------------
// Native backend, status word
// ------------------------------------------------------------------------------------------

bool plan_runs_native(const Plan& plan) {
    std::string text = plan.describe();
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text.find("native") != std::string::npos &&
           text.find("cublaslt") == std::string::npos;
}

std::vector<std::string> native_kernel_names() {
    std::vector<std::string> names;
    for (int i = 0; i < moegemm_kernel_count(); ++i) {
        const std::string name = moegemm_kernel_name(i);
        if (name.rfind("sm90_", 0) == 0) names.push_back(name);
    }
    return names;
}

bool forced_kernel_serves(const std::string& kernel, const Geometry& g, moegemm_dtype_t out,
                          moegemm_dtype_t in, moegemm_scale_mode_t scales) {
    if (kernel.empty()) return true;
    if (kernel.find("tma_store") != std::string::npos && out == MOEGEMM_DTYPE_F32) return false;
    if (kernel.find("swap_ab") != std::string::npos && in == MOEGEMM_DTYPE_E4M3 &&
        scales == MOEGEMM_SCALE_BLOCK) {
        return false;
    }
    const int64_t block_n = kernel.find("x256") != std::string::npos ? 256 : 128;
    const int64_t tiles_n = (g.n + block_n - 1) / block_n;
    return kernel.find("_c2") == std::string::npos || tiles_n % 2 == 0;
}

StatusWord::StatusWord(const Plan& plan) {
    MGT_REQUIRE_OK(moegemm_plan_get_status_word(plan.get(), &word_));
    REQUIRE(word_ != nullptr);
}

uint32_t StatusWord::read() const {
    uint32_t v = 0xDEADBEEFu;
    MGT_CUDA_REQUIRE(cudaMemcpy(&v, word_, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

void StatusWord::clear() const {
    MGT_CUDA_REQUIRE(cudaMemset(word_, 0, sizeof(uint32_t)));
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
}

// ------------------------------------------------------------------------------------------
// CUDA graphs and held streams
// ------------------------------------------------------------------------------------------

Graph::~Graph() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
}

Outcome capture_execute(Graph& g, cudaStream_t s, moegemm_plan_t plan, const Workload& w, void* d,
                        void* ws, size_t ws_bytes) {
    MGT_CUDA_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const Outcome o =
        outcome(moegemm_execute(plan, w.a(), w.b(), d, nullptr, nullptr, ws, ws_bytes, s));
    const cudaError_t end = cudaStreamEndCapture(s, &g.graph);
    INFO("moegemm_execute under capture -> " << o.str());
    REQUIRE(o.status == MOEGEMM_STATUS_SUCCESS);
    MGT_CUDA_REQUIRE(end);
    REQUIRE(g.graph != nullptr);
    size_t nodes = 0;
    MGT_CUDA_REQUIRE(cudaGraphGetNodes(g.graph, nullptr, &nodes));
    CHECK(nodes > 0);
    MGT_CUDA_REQUIRE(cudaGraphInstantiate(&g.exec, g.graph, 0));
    return o;
}

void CUDART_CB hold_stream(void* p) {
    auto* gate = static_cast<Gate*>(p);
    gate->entered = true;
    const auto start = std::chrono::steady_clock::now();
    while (!gate->open.load()) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) {
            gate->timed_out = true;
            return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

}  // namespace mgt
