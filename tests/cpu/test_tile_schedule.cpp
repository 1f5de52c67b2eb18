// The native kernel's tile schedule (src/native/tile_scheduler.cuh), run on the CPU: the clamp of
// raw sizes, the tile prefix and map_tile are the very functions the kernel calls. For random
// and adversarial size vectors, every output element of every expert must be covered by
// exactly one tile, no tile may reach past its expert's rows, and clamping must follow moegemm.h.
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "native/grouped_gemm_params.hpp"
#include "native/tile_scheduler.cuh"

using namespace moegemm::native;

namespace {

struct Schedule {
    std::vector<ExpertRows> experts;
    std::vector<int32_t> tile_start;  // E + 1
    uint32_t flags = 0;
};

// What the kernel's build_schedule computes, sequentially.
Schedule build(RowLayout layout, const std::vector<int32_t>& raw, int64_t max_rows,
               int32_t block_m, int32_t tiles_n) {
    Schedule s;
    int64_t prefix = 0;
    s.tile_start.push_back(0);
    for (int32_t e = 0; e < static_cast<int32_t>(raw.size()); ++e) {
        const ExpertRows x = clamp_expert_rows(layout, e, raw[e], prefix, max_rows);
        prefix += std::max(raw[e], 0);
        s.experts.push_back(x);
        s.flags |= x.flags;
        s.tile_start.push_back(s.tile_start.back() + expert_tiles(x.rows, block_m, tiles_n));
    }
    return s;
}

// Checks every invariant of one schedule; returns the number of violations.
int64_t violations(RowLayout layout, const std::vector<int32_t>& raw, int64_t max_rows,
                   int32_t block_m, int32_t n, int32_t block_n, int32_t cluster_n = 1) {
    const int32_t tiles_n = (n + block_n - 1) / block_n;
    if (tiles_n % cluster_n != 0) return 0;  // not a configuration the kernel accepts
    const int32_t experts = static_cast<int32_t>(raw.size());
    const Schedule s = build(layout, raw, max_rows, block_m, tiles_n);
    int64_t bad = 0;

    // Clamped rows: within [0, capacity], never more than asked, laid out as the layout says.
    int64_t end_of_previous = 0;
    for (int32_t e = 0; e < experts; ++e) {
        const ExpertRows& x = s.experts[e];
        bad += x.rows < 0;
        bad += layout != RowLayout::Fixed && x.rows > std::max(raw[e], 0);
        if (layout == RowLayout::Variable) {
            bad += x.row_start != end_of_previous;  // contiguous, in expert order
            end_of_previous = x.row_start + x.rows;
            bad += end_of_previous > max_rows;
        } else {
            bad += x.row_start != static_cast<int64_t>(e) * max_rows;
            bad += x.rows > max_rows;
        }
    }

    // Coverage: count how often each (expert, row block, column block) is produced.
    std::set<std::tuple<int32_t, int32_t, int32_t>> seen;
    const int32_t total = s.tile_start[experts];
    for (int32_t tile = 0; tile < total; ++tile) {
        const TileCoord c = map_tile(tile, s.tile_start.data(), experts, tiles_n, cluster_n);
        // The CTAs of a cluster (tiles g * cluster_n + r) share the expert and the A rows, and
        // take neighbouring column tiles.
        if (tile % cluster_n != 0) {
            const TileCoord lead =
                map_tile(tile - tile % cluster_n, s.tile_start.data(), experts, tiles_n, cluster_n);
            bad += lead.expert != c.expert || lead.m_tile != c.m_tile ||
                   lead.n_tile + tile % cluster_n != c.n_tile;
        }
        if (c.expert < 0 || c.expert >= experts) {
            ++bad;
            continue;
        }
        const int32_t rows = s.experts[c.expert].rows;
        const int32_t tiles_m = (rows + block_m - 1) / block_m;
        bad += rows <= 0;                          // an empty expert never gets a tile
        bad += c.m_tile < 0 || c.m_tile >= tiles_m;  // the tile starts inside the expert
        bad += c.n_tile < 0 || c.n_tile >= tiles_n;
        bad += !seen.insert({c.expert, c.m_tile, c.n_tile}).second;  // exactly once
    }
    // Every row block of every expert was produced: with the bounded epilogue (rows of the
    // tile < the expert's rows, columns < n) the tiles cover each output element once.
    for (int32_t e = 0; e < experts; ++e) {
        const int32_t tiles_m = (s.experts[e].rows + block_m - 1) / block_m;
        for (int32_t m = 0; m < tiles_m; ++m)
            for (int32_t j = 0; j < tiles_n; ++j) bad += !seen.count({e, m, j});
    }
    bad += static_cast<int64_t>(seen.size()) != total;
    return bad;
}

constexpr RowLayout kLayouts[] = {RowLayout::Variable, RowLayout::Masked, RowLayout::Fixed};

}  // namespace

TEST_CASE("clamping follows the documented size rules", "[schedule]") {
    SECTION("negative sizes count as zero and are flagged") {
        const Schedule s = build(RowLayout::Variable, {5, -3, 7}, 100, 128, 1);
        CHECK(s.experts[1].rows == 0);
        CHECK(s.experts[2].row_start == 5);
        CHECK(s.flags == kClampedNegative);
    }
    SECTION("VARIABLE rows past the capacity are dropped, later experts get none") {
        const Schedule s = build(RowLayout::Variable, {60, 30, 50, 10}, 100, 128, 1);
        CHECK(s.experts[0].rows == 60);
        CHECK(s.experts[1].rows == 30);
        CHECK(s.experts[2].rows == 10);
        CHECK(s.experts[2].row_start == 90);
        CHECK(s.experts[3].rows == 0);
        CHECK(s.experts[3].row_start == 100);
        CHECK(s.flags == kClampedCapacity);
    }
    SECTION("VARIABLE sums that overflow 32 bits do not wrap") {
        const Schedule s = build(RowLayout::Variable, {INT32_MAX, INT32_MAX, INT32_MAX, 1}, 1000,
                                 128, 1);
        CHECK(s.experts[0].rows == 1000);
        for (int e = 1; e < 4; ++e) CHECK(s.experts[e].rows == 0);
        CHECK(s.flags == kClampedCapacity);
    }
    SECTION("exactly the capacity is not a clamp") {
        CHECK(build(RowLayout::Variable, {40, 60}, 100, 128, 1).flags == 0);
        CHECK(build(RowLayout::Masked, {100, 0}, 100, 128, 1).flags == 0);
    }
    SECTION("MASKED slabs are cut at max_rows") {
        const Schedule s = build(RowLayout::Masked, {101, -1, 3}, 100, 128, 1);
        CHECK(s.experts[0].rows == 100);
        CHECK(s.experts[1].rows == 0);
        CHECK(s.experts[2].row_start == 200);
        CHECK(s.flags == (kClampedCapacity | kClampedNegative));
    }
    SECTION("FIXED ignores the sizes") {
        const Schedule s = build(RowLayout::Fixed, {-5, 0, 1}, 64, 128, 1);
        for (int e = 0; e < 3; ++e) CHECK(s.experts[e].rows == 64);
        CHECK(s.flags == kClampedNegative);  // the raw value was negative; it is reported
    }
}

TEST_CASE("every output element is covered by exactly one tile: adversarial sizes", "[schedule]") {
    const std::vector<std::vector<int32_t>> cases = {
        {0},
        {1},
        {127},
        {128},
        {129},
        {0, 0, 0, 0},
        {0, 0, 0, 300},
        {300, 0, 0, 0},
        {1, 0, 1, 0, 1, 0, 1},
        {255, 256, 257, 0, 128, 127, 129},
        {-1, 5, -100, INT32_MIN, 7},
        {INT32_MAX, 3, 4},
        {5000, 5000, 5000},  // past any capacity below 15000
    };
    for (RowLayout layout : kLayouts) {
        for (const auto& raw : cases) {
            for (int64_t max_rows : {1, 100, 128, 1000, 20000}) {
                for (int32_t n : {8, 120, 128, 136, 1536}) {
                    for (int32_t block_n : {128, 256}) {
                        for (int32_t cluster_n : {1, 2}) {
                            INFO("layout " << static_cast<int>(layout) << " max_rows "
                                           << max_rows << " n " << n << " block_n " << block_n
                                           << " cluster_n " << cluster_n << " experts "
                                           << raw.size());
                            CHECK(violations(layout, raw, max_rows, 128, n, block_n, cluster_n) == 0);
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("every output element is covered by exactly one tile: random sizes", "[schedule]") {
    std::mt19937 rng(20261122);
    for (int trial = 0; trial < 400; ++trial) {
        const int32_t experts = std::uniform_int_distribution<int32_t>(1, trial < 20 ? 1024 : 160)(rng);
        const int32_t scale = std::uniform_int_distribution<int32_t>(1, 3000)(rng);
        std::vector<int32_t> raw(static_cast<size_t>(experts));
        for (auto& m : raw) {
            const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
            m = kind == 0 ? 0 : kind == 1 ? -std::uniform_int_distribution<int32_t>(1, 50)(rng)
                                          : std::uniform_int_distribution<int32_t>(0, scale)(rng);
        }
        int64_t sum = 0;
        for (int32_t m : raw) sum += std::max(m, 0);
        const int64_t max_rows = std::max<int64_t>(
            1, sum * std::uniform_int_distribution<int>(50, 150)(rng) / 100);
        const int32_t n = 8 * std::uniform_int_distribution<int32_t>(1, 600)(rng);
        const RowLayout layout = kLayouts[trial % 3];
        INFO("trial " << trial << " experts " << experts << " max_rows " << max_rows << " n " << n);
        for (int32_t cluster_n : {1, 2}) {
            CHECK(violations(layout, raw, layout == RowLayout::Variable ? max_rows : scale, 128,
                             n, trial % 2 ? 128 : 256, cluster_n) == 0);
        }
    }
}

// ---- The tile scheduler: every warp role walks one cluster's work items in the order it
// gives. Round robin and tile tickets (tickets drawn in any order across clusters) must each
// hand every cluster tile to exactly one cluster, and with map_tile every output tile to
// exactly one CTA of it.
TEST_CASE("tile scheduler: every cluster tile to exactly one cluster, round robin or by ticket",
          "[schedule]") {
    std::mt19937 rng(36);
    int launches = 0;
    for (int32_t slots : {1, 2, 3, 7, 64, 66, 132}) {
        for (int32_t cluster_tiles = 0; cluster_tiles <= 4 * slots + 3;
             cluster_tiles += (slots > 8 ? 5 : 1)) {
            ++launches;
            INFO(slots << " slots, " << cluster_tiles << " cluster tiles");
            std::vector<int> round_robin(static_cast<std::size_t>(cluster_tiles), 0);
            std::vector<int> tickets(static_cast<std::size_t>(cluster_tiles), 0);
            // Round robin: each cluster's sequence, until -1; it never comes back.
            for (int32_t slot = 0; slot < slots; ++slot) {
                const TileScheduler s{slot, slots, cluster_tiles};
                int32_t index = 0;
                for (int32_t t = s.round_robin(0); t >= 0; t = s.round_robin(++index)) {
                    REQUIRE(t < cluster_tiles);
                    CHECK(t == slot + index * slots);
                    ++round_robin[static_cast<std::size_t>(t)];
                }
                CHECK(s.round_robin(index + 1) == -1);
                // Tickets: the first work item is the slot (or nothing), as in round robin.
                const int32_t first = s.round_robin(0);
                CHECK(first == (slot < cluster_tiles ? slot : -1));
                if (first >= 0) ++tickets[static_cast<std::size_t>(first)];
            }
            // Tickets 0, 1, 2, ... drawn by whichever cluster asks, each exactly once: a
            // cluster that started draws until its ticket is past the end.
            const int32_t takers = std::min(slots, cluster_tiles);
            std::vector<bool> done(static_cast<std::size_t>(takers), false);
            uint32_t next_ticket = 0;
            int32_t finished = 0;
            bool last_seen = false;
            while (finished < takers) {
                const int32_t taker = std::uniform_int_distribution<int32_t>(0, takers - 1)(rng);
                if (done[static_cast<std::size_t>(taker)]) continue;
                const TileScheduler s{taker, slots, cluster_tiles};
                const uint32_t ticket = next_ticket++;
                last_seen = last_seen || s.is_last_ticket(ticket);
                const int32_t t = s.after_ticket(ticket);
                if (t < 0) {
                    done[static_cast<std::size_t>(taker)] = true;
                    ++finished;
                } else {
                    REQUIRE(t < cluster_tiles);
                    ++tickets[static_cast<std::size_t>(t)];
                }
            }
            // A launch draws exactly cluster_tiles tickets (the last one rewinds the word).
            CHECK(next_ticket == static_cast<uint32_t>(cluster_tiles));
            CHECK(last_seen == (cluster_tiles > 0));
            for (int32_t t = 0; t < cluster_tiles; ++t) {
                REQUIRE(round_robin[static_cast<std::size_t>(t)] == 1);
                REQUIRE(tickets[static_cast<std::size_t>(t)] == 1);
            }
        }
    }
    CHECK(launches > 100);
}

TEST_CASE("tile scheduler: with map_tile, the CTAs of a cluster cover every output tile once",
          "[schedule]") {
    // Experts of 0 to 700 rows on 128-row tiles, 8 or 12 column tiles, clusters of 1 or 2.
    std::mt19937 rng(2026);
    for (int trial = 0; trial < 50; ++trial) {
        const int32_t experts = std::uniform_int_distribution<int32_t>(1, 40)(rng);
        const int32_t tiles_n = trial % 2 ? 8 : 12;
        std::vector<int32_t> tile_start(static_cast<std::size_t>(experts) + 1, 0);
        for (int32_t e = 0; e < experts; ++e) {
            const int32_t rows = std::uniform_int_distribution<int32_t>(0, 700)(rng);
            tile_start[e + 1] = tile_start[e] + expert_tiles(rows, 128, tiles_n);
        }
        for (int32_t cluster_n : {1, 2}) {
            const int32_t total = tile_start[experts];
            const TileScheduler s{0, 1, total / cluster_n};
            std::set<std::tuple<int32_t, int32_t, int32_t>> seen;
            for (int32_t index = 0, t = s.round_robin(0); t >= 0; t = s.round_robin(++index)) {
                for (int32_t rank = 0; rank < cluster_n; ++rank) {
                    const TileCoord c = map_tile(t * cluster_n + rank, tile_start.data(), experts,
                                                 tiles_n, cluster_n);
                    REQUIRE(seen.insert({c.expert, c.m_tile, c.n_tile}).second);
                }
            }
            INFO("trial " << trial << ", cluster " << cluster_n);
            CHECK(static_cast<int32_t>(seen.size()) == total);
        }
    }
}

namespace {

// One launch's takers of tile tickets (the leaders of `slots` clusters over `groups` tile
// groups), their memory operations interleaved at random on one simulated word, as the kernel
// does them: a taker with a first group (its index) reads the word at its start, claims it
// after that group (compare-and-swap while what it saw is stale, claim_ticket_word), then adds
// once per group until its ticket is past the end; the taker of the last ticket rewinds the
// word. Returns how many times each group was worked on; `swaps` counts the compare-and-swaps.
std::vector<int> run_ticket_launch(uint64_t& word, uint32_t tag, int32_t slots, int32_t groups,
                                   std::mt19937& rng, int* swaps) {
    enum class State { Read, Claim, Add, Done };
    struct Taker {
        State state = State::Read;
        uint64_t seen = 0;
    };
    std::vector<int> worked(static_cast<std::size_t>(std::max(groups, 0)), 0);
    std::vector<Taker> all;
    for (int32_t i = 0; i < std::min(slots, groups); ++i) {
        all.emplace_back();
        ++worked[static_cast<std::size_t>(i)];  // its first group, by index
    }
    for (;;) {
        std::vector<Taker*> busy;
        for (Taker& t : all)
            if (t.state != State::Done) busy.push_back(&t);
        if (busy.empty()) return worked;
        Taker& t = *busy[std::uniform_int_distribution<std::size_t>(0, busy.size() - 1)(rng)];
        switch (t.state) {
            case State::Read:
                t.seen = word;
                t.state = State::Claim;
                break;
            case State::Claim: {  // one step of claim_ticket_word's loop
                if (ticket_word_is_current(t.seen, tag)) {
                    t.state = State::Add;
                    break;
                }
                ++*swaps;
                const uint64_t found = word;
                if (found == t.seen) {
                    word = ticket_word(tag, 0);
                    t.state = State::Add;
                } else {
                    t.seen = found;
                }
                break;
            }
            case State::Add: {
                const uint64_t taken = word++;
                REQUIRE(ticket_word_is_current(taken, tag));  // nobody adds to a stale word
                const uint32_t ticket = static_cast<uint32_t>(taken);
                const TileScheduler scheduler{0, slots, groups};
                const int32_t group = scheduler.after_ticket(ticket);
                if (group >= 0) {
                    ++worked[static_cast<std::size_t>(group)];
                } else {
                    if (scheduler.is_last_ticket(ticket)) word = ticket_word(tag, 0);
                    t.state = State::Done;
                }
                break;
            }
            case State::Done:
                break;
        }
    }
}

}  // namespace

TEST_CASE("tile tickets: each group is worked on once, from any word the workspace held",
          "[schedule]") {
    std::mt19937 rng(7);
    const uint32_t tag = 0x9e3779b9u;
    const std::vector<uint64_t> initial = {
        0,                                   // a zeroed workspace
        ticket_word(tag - 1, 12345),         // the previous launch's word
        ticket_word(tag + 1, 0),             // a later launch's (the tag is what counts)
        ticket_word(tag - 1, 0xffffffffu),   // one add short of carrying into this tag
        0xdeadbeefcafef00dull,               // garbage
        ~0ull,                               // all ones
    };
    for (const uint64_t start : initial) {
        for (int32_t slots : {1, 2, 3, 16, 66, 132}) {
            for (int32_t groups : {0, 1, slots - 1, slots, slots + 1, 3 * slots + 5}) {
                if (groups < 0) continue;
                uint64_t word = start;
                int swaps = 0;
                const std::vector<int> worked = run_ticket_launch(word, tag, slots, groups, rng,
                                                                  &swaps);
                INFO("initial word " << start << ", " << slots << " slots, " << groups
                                     << " groups");
                for (int32_t g = 0; g < groups; ++g) REQUIRE(worked[g] == 1);
                // A taker swaps at most once: the word it saw is the stale one, or the tag is
                // in by the time it swaps (a bound, not a race that may go on).
                CHECK(swaps <= std::min(slots, groups));
                // Left as a claim leaves it, unless nothing was taken.
                if (groups > 0) CHECK(word == ticket_word(tag, 0));
            }
        }
    }
}

TEST_CASE("tile tickets: replays with the same tag (CUDA graphs) each work on every group",
          "[schedule]") {
    // Every replay of a graph's kernel node runs with the same %gridid. Without the rewind the
    // second replay found the first one's spent count under its own tag and skipped groups.
    std::mt19937 rng(11);
    uint64_t word = 0xa5a5a5a5a5a5a5a5ull;
    const uint32_t graph_tag = 77;
    int launches = 0;
    for (int round = 0; round < 40; ++round) {
        // Graph replays, interleaved now and then with other launches (other tags) and with
        // sizes that change between replays (device sizes: another group count).
        const uint32_t tag = round % 7 == 3 ? 1000u + round : graph_tag;
        const int32_t slots = 66;
        const int32_t groups = round % 5 == 0 ? 40 : 66 + 13 * (round % 9);
        int swaps = 0;
        const std::vector<int> worked = run_ticket_launch(word, tag, slots, groups, rng, &swaps);
        INFO("round " << round << ", tag " << tag << ", " << groups << " groups");
        for (int32_t g = 0; g < groups; ++g) REQUIRE(worked[g] == 1);
        CHECK(word == ticket_word(tag, 0));
        ++launches;
    }
    CHECK(launches == 40);
}

TEST_CASE("tile tickets: the last ticket is cluster_tiles - 1", "[schedule]") {
    CHECK(TileScheduler{0, 66, 100}.is_last_ticket(99));
    CHECK_FALSE(TileScheduler{0, 66, 100}.is_last_ticket(98));
    CHECK_FALSE(TileScheduler{0, 66, 100}.is_last_ticket(100));
    CHECK(TileScheduler{0, 1, 1}.is_last_ticket(0));
    CHECK_FALSE(TileScheduler{0, 1, 0}.is_last_ticket(0));  // nothing taken, nothing rewound
    CHECK_FALSE(TileScheduler{0, 1, 0}.is_last_ticket(0xffffffffu));
}

TEST_CASE("tile tickets: ticket t is cluster tile slots + t, or -1 past the last", "[schedule]") {
    CHECK(TileScheduler{5, 66, 100}.after_ticket(0) == 66);
    CHECK(TileScheduler{5, 66, 100}.after_ticket(33) == 99);
    CHECK(TileScheduler{5, 66, 100}.after_ticket(34) == -1);
    CHECK(TileScheduler{5, 132, 132}.after_ticket(0) == -1);
    CHECK(TileScheduler{5, 132, 10}.after_ticket(0) == -1);
    // Tickets keep counting past the end (every taker takes one more than it uses): no wrap.
    CHECK(TileScheduler{0, 132, 0x7fffffff}.after_ticket(0xffffffffu) == -1);
    CHECK(TileScheduler{0, 132, 0x7fffffff}.after_ticket(0x7fffffffu - 133) == 0x7fffffff - 1);
    // Round robin near the 32-bit end does not wrap either.
    CHECK(TileScheduler{131, 132, 0x7fffffff}.round_robin(0x7fffffff) == -1);
}

TEST_CASE("host schedule: the kernel's schedule, laid out row starts, rows, tile prefix",
          "[schedule]") {
    std::mt19937 rng(2024);
    for (const RowLayout layout : {RowLayout::Variable, RowLayout::Masked, RowLayout::Fixed}) {
        for (int trial = 0; trial < 200; ++trial) {
            const int32_t experts = std::uniform_int_distribution<int32_t>(1, 341)(rng);
            const int32_t block_m = trial % 2 ? 64 : 128;
            const int32_t tiles_n = std::uniform_int_distribution<int32_t>(1, 40)(rng);
            std::vector<int32_t> raw(static_cast<std::size_t>(experts));
            for (int32_t& r : raw) r = std::uniform_int_distribution<int32_t>(0, 300)(rng);
            const int64_t per_expert = 300;
            const int64_t max_rows = layout == RowLayout::Variable ? per_expert * experts : per_expert;
            CAPTURE(static_cast<int>(layout), experts, block_m, tiles_n);
            REQUIRE(schedule_ints(experts) == 3 * experts + 1);
            std::vector<int32_t> out(static_cast<std::size_t>(schedule_ints(experts)), -7);
            const uint32_t flags = build_host_schedule(layout, raw.data(), experts, max_rows,
                                                       block_m, tiles_n, out.data());
            CHECK(flags == 0u);  // sizes within capacity clamp nothing
            const int32_t* row_start = out.data();
            const int32_t* rows = out.data() + experts;
            const int32_t* tile_start = out.data() + 2 * experts;
            int64_t prefix = 0;
            int32_t tiles = 0;
            bool ok = true;
            for (int32_t e = 0; e < experts; ++e) {
                const int32_t want_rows = layout == RowLayout::Fixed ? 300 : raw[e];
                const int64_t want_start = layout == RowLayout::Variable ? prefix : e * per_expert;
                ok = ok && rows[e] == want_rows && row_start[e] == want_start &&
                     tile_start[e] == tiles;
                prefix += raw[e];
                tiles += (want_rows + block_m - 1) / block_m * tiles_n;
            }
            CHECK(ok);
            CHECK(tile_start[experts] == tiles);
            // And every tile maps back to an expert that has it.
            for (int32_t t = 0; t < tiles; t += 7) {
                const TileCoord c = map_tile(t, tile_start, experts, tiles_n);
                if (c.m_tile * block_m >= rows[c.expert]) {
                    FAIL_CHECK("tile " << t << " maps past expert " << c.expert << "'s rows");
                    break;
                }
            }
        }
    }
    // A capacity clamp (VARIABLE rows past max_rows) is reported, as the kernel would.
    const int32_t raw[3] = {100, 100, 100};
    int32_t out[10];
    CHECK((build_host_schedule(RowLayout::Variable, raw, 3, 250, 64, 2, out) & kClampedCapacity) != 0);
    CHECK(out[3 + 2] == 50);  // the last expert keeps the 50 rows that still fit
}

TEST_CASE("A boxes: the shortest of the three heights that covers the tile's rows", "[schedule]") {
    // Swap-AB multiplies exactly the box's rows (wgmma's N): a box shorter than the tile would
    // drop rows, a taller one than needed reads and multiplies rows for nothing.
    for (int block_m : {64, 128}) {
        for (int32_t rows = 1; rows <= block_m; ++rows) {
            INFO("block_m " << block_m << ", rows " << rows);
            const int box = moegemm::native::a_box_index(rows, block_m);
            REQUIRE(box >= 0);
            REQUIRE(box < moegemm::native::kABoxHeights);
            const int height = block_m >> box;
            CHECK(height >= rows);
            if (box + 1 < moegemm::native::kABoxHeights) CHECK(height / 2 < rows);
        }
        CHECK(moegemm::native::a_box_index(1, block_m) == 2);
        CHECK(moegemm::native::a_box_index(block_m, block_m) == 0);
    }
    // The swap-AB decode tile: 16, 32 or 64 tokens.
    CHECK((64 >> moegemm::native::a_box_index(16, 64)) == 16);
    CHECK((64 >> moegemm::native::a_box_index(17, 64)) == 32);
    CHECK((64 >> moegemm::native::a_box_index(33, 64)) == 64);
}

TEST_CASE("decode weights: unhinted copies stream at least twice the L2, and no more than a copy "
          "per CTA past it", "[schedule]") {
    using moegemm::native::weight_copies_without_l2_hint;
    // The H200 (60 MiB, 132 SMs) and H100 (50 MiB) with 64 x 128 tiles (16 KB per copy), a
    // 64 x 256 tile (32 KB), and smaller grids.
    for (std::size_t l2 : {std::size_t{60} << 20, std::size_t{50} << 20, std::size_t{1} << 20}) {
        for (int ctas : {1, 7, 128, 132}) {
            for (std::size_t copy : {std::size_t{16384}, std::size_t{32768}}) {
                INFO("L2 " << l2 << ", " << ctas << " CTAs, " << copy << " bytes per copy");
                const int64_t copies = weight_copies_without_l2_hint(l2, ctas, copy);
                const std::size_t streamed = static_cast<std::size_t>(copies) * ctas * copy;
                CHECK(streamed >= 2 * l2);
                CHECK(streamed < 2 * l2 + ctas * copy);
            }
        }
    }
    CHECK(weight_copies_without_l2_hint(std::size_t{60} << 20, 132, 16384) == 59);
    CHECK(weight_copies_without_l2_hint(std::size_t{50} << 20, 132, 16384) == 49);
    // No L2 reported, no CTAs or an empty copy: evict-first from the first copy.
    CHECK(weight_copies_without_l2_hint(0, 132, 16384) == 0);
    CHECK(weight_copies_without_l2_hint(std::size_t{60} << 20, 0, 16384) == 0);
    CHECK(weight_copies_without_l2_hint(std::size_t{60} << 20, 132, 0) == 0);
    // A CTA takes them all where they are at most a quarter of its copies, else none.
    using moegemm::native::unhinted_copies_for_stream;
    CHECK(unhinted_copies_for_stream(59, 434) == 59);  // bf16 mixtral-fc2, H200
    CHECK(unhinted_copies_for_stream(59, 236) == 59);
    CHECK(unhinted_copies_for_stream(59, 235) == 0);
    CHECK(unhinted_copies_for_stream(59, 82) == 0);    // fp8 qwen3moe-fc2
    CHECK(unhinted_copies_for_stream(59, 0) == 0);
    CHECK(unhinted_copies_for_stream(0, 0) == 0);
    CHECK(unhinted_copies_for_stream(1000000, int64_t{1} << 40) == 1000000);
}

// The shared-memory layout of TileConfig (grouped_gemm_params.hpp): with the BLOCK scale ring the
// kernel asks for kSmemLimit and puts one slot per stage after the schedule, 16-byte aligned,
// using the 1024 bytes kept for aligning the base. For every instance shape and every E, the
// ring is offered only where it ends inside the limit, and never overlaps what precedes it.
template <int BlockM, int BlockN, bool TmaStore>
void check_block_scale_ring(int first_fitting, int last_of_first_range) {
    using Config = TileConfig<BlockM, BlockN, TmaStore>;
    INFO(BlockM << " x " << BlockN << (TmaStore ? " TMA-store" : " register"));
    STATIC_REQUIRE(Config::kBlockScaleSlotBytes % 16 == 0);
    STATIC_REQUIRE(Config::kBlockScaleSlotBytes >=
                   sizeof(float) * (BlockM + BlockN / 128));
    int first = 0, last_of_first = 0;
    for (int e = 1; e <= MOEGEMM_MAX_EXPERTS; ++e) {
        INFO("experts " << e);
        const std::size_t offset = Config::block_scale_ring_offset(e);
        const std::size_t ring_end = offset + Config::stages(e) * Config::kBlockScaleSlotBytes +
                                     sizeof(ScaleWarpHandOff);
        CHECK(Config::block_scale_ring_bytes(Config::stages(e)) == ring_end - offset);
        CHECK(offset % 16 == 0);
        // After everything else the aligned base holds (smem_bytes less the alignment slack).
        CHECK(offset >= Config::smem_bytes(e) - 1024);
        CHECK(offset < Config::smem_bytes(e) - 1024 + 16);
        CHECK(Config::block_scale_ring_fits(e) == (ring_end <= Config::kSmemLimit));
        // Without the ring the usual layout fits with its slack, as before.
        CHECK(Config::smem_bytes(e) <= Config::kSmemLimit);
        // The first run of experts' counts where it fits.
        if (Config::block_scale_ring_fits(e)) {
            if (first == 0)
                first = last_of_first = e;
            else if (last_of_first == e - 1)
                last_of_first = e;
        }
    }
    CHECK(first == first_fitting);
    CHECK(last_of_first == last_of_first_range);
}

TEST_CASE("BLOCK scale ring: where it fits in shared memory", "[schedule]") {
    // 128 x 256 with the TMA-store epilogue (the BLOCK prefill pick): 4 stages up to 153
    // experts, the ring (its slots and the scale warps' hand-off) beside them up to 59; 3
    // stages from 154 on, the ring beside them.
    check_block_scale_ring<128, 256, true>(1, 59);
    check_block_scale_ring<128, 256, false>(1, 1024);
    check_block_scale_ring<128, 128, true>(154, 1024);
    check_block_scale_ring<128, 128, false>(69, 1024);
    check_block_scale_ring<64, 256, false>(1, 1024);
    check_block_scale_ring<64, 128, false>(1, 1024);
    CHECK_FALSE(TileConfig<128, 256, true>::block_scale_ring_fits(60));
    CHECK_FALSE(TileConfig<128, 256, true>::block_scale_ring_fits(153));
    CHECK(TileConfig<128, 256, true>::block_scale_ring_fits(154));
    CHECK(TileConfig<128, 256, true>::stages(153) == 4);
    CHECK(TileConfig<128, 256, true>::stages(154) == 3);
}

// The stages a plan with the ring runs: as many as fit where the ring fits beside them, else one
// fewer (never below 3) where it then fits; the ring then ends inside the limit even from a base
// the kernel had to align (the slack is free again).
template <int BlockM, int BlockN, bool TmaStore>
void check_block_scale_ring_stages() {
    using Config = TileConfig<BlockM, BlockN, TmaStore>;
    INFO(BlockM << " x " << BlockN << (TmaStore ? " TMA-store" : " register"));
    for (int e = 1; e <= MOEGEMM_MAX_EXPERTS; ++e) {
        INFO("experts " << e);
        const int most = Config::stages(e);
        const int ring = Config::block_scale_ring_stages(e);
        if (Config::block_scale_ring_fits(e)) {
            CHECK(ring == most);
        } else if (ring != 0) {
            CHECK(ring == most - 1);
            CHECK(ring >= 3);
            const std::size_t end =
                Config::block_scale_ring_offset(e, ring) + Config::block_scale_ring_bytes(ring);
            CHECK(end + 1024 <= Config::kSmemLimit);
            CHECK(Config::block_scale_ring_offset(e, ring) >=
                  Config::kFixedBytes - 1024 + ring * Config::kStageBytes +
                      Config::schedule_bytes(e));
        } else {
            CHECK_FALSE(Config::block_scale_ring_fits(e, most - 1));
        }
    }
}

TEST_CASE("BLOCK scale ring: the stages a plan with it runs", "[schedule]") {
    check_block_scale_ring_stages<128, 256, true>();
    check_block_scale_ring_stages<128, 256, false>();
    check_block_scale_ring_stages<128, 128, true>();
    check_block_scale_ring_stages<128, 128, false>();
    // 128 x 256 TMA-store tiles (the BLOCK prefill pick): 4 stages and the ring up to 59
    // experts, 3 and the ring from 60 to 153 (qwen3moe and gptoss: 128), then 3 (all that
    // fit).
    using Pick = TileConfig<128, 256, true>;
    CHECK(Pick::block_scale_ring_stages(59) == 4);
    CHECK(Pick::block_scale_ring_stages(60) == 3);
    CHECK(Pick::block_scale_ring_stages(128) == 3);
    CHECK(Pick::block_scale_ring_stages(153) == 3);
    CHECK(Pick::block_scale_ring_stages(1024) == Pick::stages(1024));
}

TEST_CASE("idle halves: the share of MMA work skipped, and which plans skip", "[schedule]") {
    // Per expert: 64-row halves with rows / halves of its 128-row tiles.
    // 0: 0/0; 1: 1/2; 64: 1/2; 65: 2/2; 128: 2/2; 129: 3/4; 200: 4/4; 193: 4/4.
    const int32_t rows[] = {0, 1, 64, 65, 128, 129, 200, 193};
    CHECK(idle_half_share(rows, 8) == Approx(1.0 - 17.0 / 20.0));
    CHECK(idle_half_share(rows, 1) == 0.0);  // no rows at all
    const int32_t full[] = {128, 256, 0, 384};
    CHECK(idle_half_share(full, 4) == 0.0);
    const int32_t small[] = {3, 64, 17};
    CHECK(idle_half_share(small, 3) == Approx(0.5));
    const int32_t negative[] = {-5, 64};  // clamped rows are never negative; counted as none
    CHECK(idle_half_share(negative, 2) == Approx(0.5));
    // Large counts stay exact in 64 bits.
    const int32_t huge[] = {2147483647, 1};
    CHECK(idle_half_share(huge, 2) > 0.0);

    // With tile tickets: at any share; round robin from 6%; never on 64-row tiles or when
    // switched off (the skip_idle_halves option off).
    CHECK(skips_idle_halves(true, 128, true, 0.0));
    CHECK_FALSE(skips_idle_halves(true, 128, false, 0.0));
    CHECK_FALSE(skips_idle_halves(true, 128, false, 0.041));  // dsv3ep8: measured slower
    CHECK(skips_idle_halves(true, 128, false, 0.06));
    CHECK(skips_idle_halves(true, 128, false, 0.086));  // qwen3moe: measured faster
    CHECK_FALSE(skips_idle_halves(true, 64, true, 0.5));
    CHECK_FALSE(skips_idle_halves(false, 128, true, 0.5));
}
