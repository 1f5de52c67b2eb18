// --check: compares the D that a backend writes with the D of the reference peer.
#pragma once

#include "grouped_gemm.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moegemm_bench {

/// Largest accepted max |D - D_ref| / max |D_ref|. Two correct fp32-accumulating kernels differ
/// by their summation order and one bf16 rounding of each output (2^-8 relative), so a correct
/// backend sits near 1e-3 and a wrong one near 1.
inline constexpr double kCheckTolerance = 1e-2;

struct CheckResult {
    std::string backend;    ///< the backend compared with the reference
    std::string reference;  ///< the reference backend
    bool compared = false;  ///< false when either output is missing (see note)
    bool passed = false;
    /// Not compared by design, not a failure: the run has no reference for it (an fp8 run whose
    /// scale mode the reference cannot take; see note).
    bool skipped = false;
    double max_error = 0.0;        ///< max |D - D_ref| / max |D_ref|
    double frobenius_error = 0.0;  ///< ||D - D_ref||_F / ||D_ref||_F
    std::string note;
};

/// Runs `gemm` twice on rotation set 0, the second time after filling its D with fresh random
/// values so that rows it does not write cannot match by accident, and returns the second
/// call's D (bf16 bits) in the workload's VARIABLE layout: the workload's D, or
/// GroupedGemm::compact_output for a backend with buffers of its own. nullopt when the
/// backend's D cannot be read that way.
std::optional<std::vector<uint16_t>> capture_output(GroupedGemm& gemm,
                                                    const WorkloadBuffers& buffers,
                                                    cudaStream_t stream);

CheckResult compare_outputs(const std::string& backend, const std::vector<uint16_t>& output,
                            const std::string& reference,
                            const std::vector<uint16_t>& reference_output);

}  // namespace moegemm_bench
