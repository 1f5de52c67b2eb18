#include "support/gpu_harness.hpp"

#include <cstring>
#include <sstream>
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

Plan::~Plan() {
    if (p_) (void)moegemm_plan_destroy(p_);
}

Outcome Plan::try_create(const moegemm_problem_t& problem) {
    moegemm_plan_t p = nullptr;
    const Outcome o = outcome(moegemm_plan_create(&problem, &p));
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
                   uint32_t seed, RefRows ref_rows)
    : g_(g), in_(in), sizes_(std::move(sizes)) {
    if (g.layout == MOEGEMM_LAYOUT_FIXED) {
        // FIXED takes no sizes: every slab row is valid. Keep them for messages.
        sizes_.assign(static_cast<size_t>(g.experts), static_cast<int32_t>(g.max_rows));
    }
    REQUIRE(sizes_.size() == static_cast<size_t>(g.experts));
    std::mt19937 rng(seed);
    std::vector<double> a_vals, b_vals;
    // Every row of A is random, including rows that no expert owns (VARIABLE past the sum,
    // MASKED past M_e): a kernel that reads them must not be able to "pass" on zeros.
    a_bits_ = random_16bit(g.a_elems(), in, rng, &a_vals);
    b_bits_ = random_16bit(g.b_elems(), in, rng, &b_vals);
    a_dev_ = DeviceBuffer(a_bytes() + kInputSlack);
    b_dev_ = DeviceBuffer(b_bytes() + kInputSlack);
    a_dev_.upload(a_bits_.data(), a_bytes());
    b_dev_.upload(b_bits_.data(), b_bytes());
    const RowSet rows =
        ref_rows == RefRows::Valid ? valid_rows(g, sizes_) : all_slab_rows(g);
    ref_ = Reference(g, a_vals, b_as_nk(g, b_vals), rows);
    if (!rows.row.empty()) {
        INFO("the reference is all zeros: the test would be trivial");
        REQUIRE(ref_.norm2() > 0.0);
    }
}

std::string Workload::str() const {
    std::ostringstream os;
    os << g_.str() << " in=" << dtype_name(in_);
    if (g_.layout != MOEGEMM_LAYOUT_FIXED) os << " sizes=" << sizes_str(sizes_);
    return os.str();
}

void Workload::check_inputs_unchanged() const {
    const std::vector<uint8_t> a = a_dev_.download();
    const std::vector<uint8_t> b = b_dev_.download();
    INFO(str());
    CHECK(std::memcmp(a.data(), a_bits_.data(), a_bytes()) == 0);
    CHECK(std::memcmp(b.data(), b_bits_.data(), b_bytes()) == 0);
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
       << (stream ? " stream=created" : " stream=legacy default");
    return os.str();
}

RunResult run_once(const Workload& w, const RunOptions& opt) {
    RunResult res;
    const Geometry& g = w.geometry();
    Plan plan;
    Outcome o = plan.try_create(make_problem(g, w.in_type(), opt.out, opt.backend));
    if (o.status != MOEGEMM_STATUS_SUCCESS) {
        res.error = "moegemm_plan_create -> " + o.str();
        return res;
    }
    res.description = plan.describe();

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

    RunResult ran = execute_plan(plan, w, opt.out, opt.stream);
    ran.description = res.description;
    return ran;
}

RunResult execute_plan(const Plan& plan, const Workload& w, moegemm_dtype_t out,
                       cudaStream_t stream) {
    RunResult res;
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
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
    res.ok = true;
    return res;
}

CompareReport check_result(const Workload& w, moegemm_dtype_t out,
                           const std::vector<uint8_t>& buffer) {
    return compare_output(w.geometry(), out, w.sizes(), w.reference(), buffer, kGuardBytes);
}

int device_cc() {
    int dev = 0, major = 0, minor = 0;
    MGT_CUDA_REQUIRE(cudaGetDevice(&dev));
    MGT_CUDA_REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    MGT_CUDA_REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major * 10 + minor;
}

}  // namespace mgt
