// A minimal streaming JSON writer: enough for moegemm-bench's report, no dependency.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace moegemm_bench {

/// Appends pretty-printed JSON to a string. Objects and arrays are opened and closed
/// explicitly; commas and indentation are handled here. Non-finite numbers become null (JSON has
/// no NaN), which is what a failed measurement reports.
class JsonWriter {
public:
    explicit JsonWriter(std::string& out) : out_(out) {}

    void begin_object() { open('{'); }
    void end_object() { close('}'); }
    void begin_array() { open('['); }
    void end_array() { close(']'); }

    /// The key of the next value inside an object.
    void key(std::string_view name) {
        separate();
        write_string(name);
        out_ += ": ";
        after_key_ = true;
    }

    void value(std::string_view text) {
        separate();
        write_string(text);
    }
    void value(const char* text) { value(std::string_view(text)); }
    void value(const std::string& text) { value(std::string_view(text)); }
    void value(bool flag) {
        separate();
        out_ += flag ? "true" : "false";
    }
    void value(double number) {
        separate();
        out_ += std::isfinite(number) ? fmt::format("{}", number) : "null";
    }
    template <
        typename Integer,
        std::enable_if_t<std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>, int> = 0>
    void value(Integer number) {
        separate();
        out_ += fmt::format("{}", number);
    }
    void null() {
        separate();
        out_ += "null";
    }

    template <typename Value>
    void field(std::string_view name, const Value& v) {
        key(name);
        value(v);
    }

private:
    void open(char bracket) {
        separate();
        out_ += bracket;
        first_.push_back(true);
    }
    void close(char bracket) {
        const bool empty = first_.back();
        first_.pop_back();
        if (!empty) newline();
        out_ += bracket;
        if (first_.empty()) out_ += '\n';
    }
    /// Before any value or key: a comma after a sibling, then a new line, except for the value
    /// that follows its key.
    void separate() {
        if (after_key_) {
            after_key_ = false;
            return;
        }
        if (first_.empty()) return;
        if (!first_.back()) out_ += ',';
        first_.back() = false;
        newline();
    }
    void newline() {
        out_ += '\n';
        out_.append(2 * first_.size(), ' ');
    }
    void write_string(std::string_view text) {
        out_ += '"';
        for (const char c : text) {
            switch (c) {
                case '"':
                    out_ += "\\\"";
                    break;
                case '\\':
                    out_ += "\\\\";
                    break;
                case '\n':
                    out_ += "\\n";
                    break;
                case '\r':
                    out_ += "\\r";
                    break;
                case '\t':
                    out_ += "\\t";
                    break;
                default:
                    if (static_cast<unsigned char>(c) < 0x20) {
                        out_ += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
                    } else {
                        out_ += c;  // UTF-8 passes through unchanged
                    }
            }
        }
        out_ += '"';
    }

    std::string& out_;
    std::vector<bool> first_;  // per open container: nothing written in it yet
    bool after_key_ = false;
};

}  // namespace moegemm_bench
