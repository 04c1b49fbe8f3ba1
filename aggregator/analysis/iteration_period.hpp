// Iterations of a DP group whose traffic has no dominant quiet (FSDP / ZeRO-3), read from the period of its
// pattern of quiets in DP volume (iteration_period.cpp). Internal to the analysis library;
// iteration_volume.cpp calls it when no reading by the longest quiets holds.
#pragma once

#include <cstddef>
#include <vector>

namespace netprism::analysis::iteration_period {

// A quiet after a burst: the DP volume of the transfers ended by the burst's end (`cum`), its length (ns)
// and the burst's index.
struct Quiet {
  double cum, len;
  size_t burst;
};

// The quiets between collectives among the quiets after the DP bursts of one group (in time order; per burst
// the DP volume ended by its end, `cum`, non-decreasing, and the quiet after it, the last burst's 0: not in
// view): those above the split of the log-quiets into inside / between collectives.
std::vector<Quiet> significant_quiets(const std::vector<double>& cum, const std::vector<double>& quiet);

// Share of the quiets that recur at volume lag L (a quiet of similar length about L later).
double recurring(const std::vector<Quiet>& s, double L);

// The iteration ends (burst indices, in order) read from the period of the quiets in volume, anchored at
// the volume before the first burst (`c0`), and the period; empty / 0 when the traffic shows no period.
// `need`: the share of recurring quiets a lag needs to be a period of this traffic (see
// iteration_period.cpp), for judging other readings alike.
// `closed`: the clock's last tick falls on the last burst within 2 % of a period (the group's DP traffic in
// view, from its first burst to its last, is a whole number of periods: the job's start and end are in view).
struct Reading {
  std::vector<size_t> ends;
  double period = 0;
  double need = 1;
  double best = 0;  // the best lag's share of recurring quiets
  bool closed = false;
};
Reading periodic_reading(const std::vector<Quiet>& s, const std::vector<double>& cum, double c0);

}  // namespace netprism::analysis::iteration_period
