// Runs the upstream C++ TACOS (github.com/astra-sim/tacos, v1.3.0) All-Gather
// synthesizer on a topology given as text, for benchmarks/cpp_random.py.
//
// Build (DIR = a checkout of astra-sim/tacos):
//   g++ -O2 -std=c++17 -I DIR/include -o tacos_cpp_harness
//       tacos_cpp_harness.cpp $(ls DIR/src/*/*.cpp)
// (every upstream source except DIR/src/main.cpp, which has its own main).
//
// Run: tacos_cpp_harness [FILE]   (reads stdin without FILE)
//
// Input, whitespace separated, '#' starts a comment running to the end of its line:
//   npus chunks_per_npu chunk_bytes runs [seed]
//   src dst bandwidth_GiBps latency_us        one line per directed link
// NPUs are 0 .. npus-1; a link src -> dst says nothing about dst -> src.
// Link time is upstream's alpha-beta model: latency + chunk_bytes / bandwidth.
//
// Output: one line per run, the collective time in microseconds that
// Synthesizer::solve returns (what upstream's tests take the minimum of),
// printed with 17 significant digits.
//
// Randomness: upstream's Synthesizer owns a std::mt19937 seeded once from
// std::random_device (a private member with no setter), and its tests reuse one
// Synthesizer for their 20 repeats. Without a seed, or with a negative one, this
// harness does the same: every run is an independent, unrepeatable draw. With a
// seed s >= 0 it reseeds that engine with s + i before run i, so the output is
// reproducible; nothing else in upstream's synthesis changes.

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <tacos/collective/all_gather.h>
#include <tacos/synthesizer/synthesizer.h>
#include <tacos/topology/topology.h>

namespace {

// Upstream builds topologies only in subclasses (setNpusCount_ and connect_ are
// protected); this one takes its links from the input.
class LinkList final : public tacos::Topology {
  public:
    explicit LinkList(int npus) { setNpusCount_(npus); }
    void link(NpuID src, NpuID dst, Bandwidth bandwidth, Latency latency) {
        connect_(src, dst, bandwidth, latency, false);
    }
};

// Reaching Synthesizer::randomEngine: names used in an explicit template
// instantiation are not access checked, so this instantiation may take the
// member's address and hand it to a friend function declared here.
std::mt19937& randomEngineOf(tacos::Synthesizer& synthesizer);

template <std::mt19937 tacos::Synthesizer::*Member>
struct RandomEngineAccess {
    friend std::mt19937& randomEngineOf(tacos::Synthesizer& synthesizer) {
        return synthesizer.*Member;
    }
};

template struct RandomEngineAccess<&tacos::Synthesizer::randomEngine>;

[[noreturn]] void fail(const std::string& message) {
    std::cerr << "tacos_cpp_harness: " << message << '\n';
    std::exit(2);
}

std::string withoutComments(std::istream& in) {
    std::string text;
    std::string line;
    while (std::getline(in, line)) {
        text += line.substr(0, line.find('#'));
        text += '\n';
    }
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 2) {
        fail("usage: tacos_cpp_harness [FILE]");
    }
    std::string text;
    if (argc == 2) {
        std::ifstream file(argv[1]);
        if (!file) {
            fail(std::string("cannot read ") + argv[1]);
        }
        text = withoutComments(file);
    } else {
        text = withoutComments(std::cin);
    }

    std::istringstream in(text);
    std::string header;
    std::getline(in, header);
    while (in && header.find_first_not_of(" \t\r") == std::string::npos) {
        std::getline(in, header);
    }
    std::istringstream fields(header);
    int npus = 0;
    int chunksPerNpu = 0;
    std::int64_t chunkBytes = 0;
    int runs = 0;
    std::int64_t seed = -1;
    if (!(fields >> npus >> chunksPerNpu >> chunkBytes >> runs)) {
        fail("first line must be: npus chunks_per_npu chunk_bytes runs [seed]");
    }
    fields >> seed;  // optional: stays -1 when absent
    if (npus < 2 || chunksPerNpu < 1 || chunkBytes < 1 || runs < 1) {
        fail("need npus >= 2, chunks_per_npu >= 1, chunk_bytes >= 1, runs >= 1");
    }

    auto topology = LinkList(npus);
    std::set<std::pair<int, int>> seen;
    int src = 0;
    int dst = 0;
    double bandwidth = 0;
    double latency = 0;
    while (in >> src >> dst >> bandwidth >> latency) {
        if (src < 0 || src >= npus || dst < 0 || dst >= npus || src == dst) {
            fail("bad link " + std::to_string(src) + " -> " + std::to_string(dst));
        }
        if (!seen.insert({src, dst}).second) {
            fail("link " + std::to_string(src) + " -> " + std::to_string(dst) + " repeats");
        }
        if (!(bandwidth > 0) || !(latency >= 0)) {
            fail("link needs bandwidth > 0 and latency >= 0");
        }
        topology.link(src, dst, bandwidth, latency);
    }
    if (!in.eof()) {
        fail("links must be lines of: src dst bandwidth_GiBps latency_us");
    }

    const auto collective = tacos::AllGather(npus, chunksPerNpu);
    auto synthesizer = tacos::Synthesizer();
    std::cout << std::setprecision(17);
    for (int run = 0; run < runs; ++run) {
        if (seed >= 0) {
            randomEngineOf(synthesizer).seed(static_cast<std::uint32_t>(seed + run));
        }
        std::cout << synthesizer.solve(topology, collective, chunkBytes) << '\n';
    }
    return 0;
}
