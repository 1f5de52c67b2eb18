// The CPU tests' check of a refusal: the call throws moegemm::Error with the expected status
// and a message that names what was wrong.
#pragma once

#include <string>

#include <catch2/catch.hpp>

#include "error.hpp"

namespace moegemm::testing {

/// Runs `f`, expecting an Error with `status` whose message contains `word`.
template <typename F>
void expect_error(F&& f, moegemm_status_t status, const std::string& word) {
    try {
        f();
        FAIL("expected " << status_name(status) << " mentioning '" << word << "'");
    } catch (const Error& e) {
        CHECK(status_name(e.status()) == std::string(status_name(status)));
        CHECK_THAT(std::string(e.what()), Catch::Contains(word));
    }
}

}  // namespace moegemm::testing
