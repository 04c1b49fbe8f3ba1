// Steps of the timeline stage (build_timeline, timeline.cpp) shared between its files:
//   timeline_sync.cpp      each DP group's synchronisation ends (sync_ends) and the stalled-episode merge;
//   timeline_pipeline.cpp  iteration boundaries of a pipeline without DP (pipeline_drains);
//   timeline_pairing.cpp   each DP group's synchronisations paired with the reference group's iterations;
//   timeline.cpp           the boundaries, the per-iteration synchronisations, the phases.
// Internal to the analysis library (the unit tests drive some steps directly).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stages.hpp"

namespace netprism::analysis::timeline_steps {

// Two classes of gaps after a full-coverage cluster: inside one synchronisation (network latency and
// reductions, milliseconds) and between iterations (a forward/backward pass). Only when the classes differ
// by more than 8x in their geometric means are they treated as two; otherwise every gap is between
// iterations. Measured on the testbed: intra-synchronisation gaps are 0.1-10 ms, steps 0.25-0.7 s (> 40x); a
// benign pause of a few steps among single-burst synchronisations is < 8x and must not look like a class.
// Pipelines without DP use the same ratio to tell a drain from a crossing (timeline_pipeline.cpp).
inline constexpr double kGapClassRatio = 8.0;

// A DP transfer of group `group`: between two of its members, in one stage.
inline bool is_dp_xfer(const Structure& s, const Xfer& x, int group) {
  return s.group_of[x.src] == group && s.group_of[x.dst] == group && s.stage_of[x.src] == s.stage_of[x.dst];
}

// A pipeline send of one of the group's members: to a node of another stage.
inline bool is_pp_send(const Structure& s, const Xfer& x, int group) {
  return s.group_of[x.src] == group && s.stage_of[x.dst] >= 0 && s.stage_of[x.dst] != s.stage_of[x.src];
}

// Synchronisation ends (in time order) of which some belong to one synchronisation: each end for which
// `same(previous kept end, end)` holds replaces the previous kept end (the later end is kept).
template <class Same>
std::vector<uint64_t> merge_ends(const std::vector<uint64_t>& ends, Same same) {
  std::vector<uint64_t> merged;
  for (uint64_t e : ends) {
    if (!merged.empty() && same(merged.back(), e))
      merged.back() = e;
    else
      merged.push_back(e);
  }
  return merged;
}

// Ends closer than `within` (ns) to the previous kept end are one synchronisation (a synchronisation
// stretched by a slow link breaks into several complete-looking episodes).
inline std::vector<uint64_t> merge_close(const std::vector<uint64_t>& ends, double within) {
  return merge_ends(ends,
                    [within](uint64_t prev, uint64_t e) { return static_cast<double>(e - prev) < within; });
}

// Ends of a group's synchronisation stalled into two episodes, merged (see timeline_sync.cpp).
std::vector<uint64_t> merge_stalled(const std::vector<uint64_t>& ends, const JobSlice& job,
                                    const Structure& s, int group);

// Iteration boundaries of a pipeline without DP (timeline_pipeline.cpp).
struct PipelineBoundaries {
  std::vector<uint64_t> boundaries;
  std::vector<uint64_t> drains;  // per boundary: the drain before it (its iteration's data begins after it)
};
PipelineBoundaries pipeline_drains(const JobSlice& job, const Structure& s);

// The reference of the iterations: the first stage's synchronisation ends (or, without DP, the pipeline's
// boundaries), one per iteration, and the median step between them.
struct Reference {
  int group = -1;              // the reference DP group; -1: a pipeline without DP
  std::vector<uint64_t> ends;  // one per iteration ("slot"), in time order
  std::vector<uint64_t> from;  // without DP: per slot, where its iteration's data begins (the drain)
  double step = 0;             // median spacing of `ends`
};

// One DP group's synchronisations attached to the reference's slots (timeline_pairing.cpp).
struct GroupEnds {
  std::vector<uint64_t>
      by_slot;  // per reference slot: the synchronisation's end (its last transfer); 0: none
  std::vector<uint64_t> in_order;  // the group's synchronisation ends, in time order
};
GroupEnds pair_group(const JobSlice& job, const Structure& s, size_t group, const Reference& ref);
// Per reference slot: the median over the group's members of when the last data of the synchronisation
// reached each (0: no synchronisation in that slot).
std::vector<uint64_t> member_ends(const JobSlice& job, const Structure& s, size_t group,
                                  const GroupEnds& ends, const Reference& ref);

}  // namespace netprism::analysis::timeline_steps
