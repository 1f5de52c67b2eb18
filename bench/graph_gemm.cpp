// A backend replayed from CUDA graphs: the launch cost a framework that captures its decode step
// pays, instead of one eager call's host work.
#include "grouped_gemm.hpp"

#include <utility>

namespace moegemm_bench {

namespace {

class GraphGemm final : public GroupedGemm {
public:
    GraphGemm(std::unique_ptr<GroupedGemm> eager, int num_sets, cudaStream_t stream)
        : eager_(std::move(eager)), stream_(stream) {
        // One eager call first, as frameworks warm up before capturing: one-time costs (module
        // loading, lazy initialization) stay out of the graphs.
        eager_->enqueue(0);
        BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int s = 0; s < num_sets; ++s) {
            graphs_.push_back(capture_graph(stream, [this, s] { eager_->enqueue(s); }));
        }
    }

    ~GraphGemm() override {
        // Replays still queued read eager_'s plan and buffers: let them finish before the
        // graphs, then eager_, are released.
        (void)cudaStreamSynchronize(stream_);
    }

    void enqueue(int set) override {
        BENCH_CUDA_CHECK(cudaGraphLaunch(graphs_.at(static_cast<size_t>(set)).get(), stream_));
    }

    bool writes_workload_output() const override { return eager_->writes_workload_output(); }
    std::string description() const override { return eager_->description(); }

private:
    std::unique_ptr<GroupedGemm> eager_;
    cudaStream_t stream_;
    std::vector<CudaGraphExec> graphs_;  // one per rotation set
};

}  // namespace

std::unique_ptr<GroupedGemm> make_graph_gemm(std::unique_ptr<GroupedGemm> eager, int num_sets,
                                             cudaStream_t stream) {
    return std::make_unique<GraphGemm>(std::move(eager), num_sets, stream);
}

}  // namespace moegemm_bench
