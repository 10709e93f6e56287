// CBC backend (coinor-libcbc, C interface), built when CMake finds CBC. The warm start goes
// in as a MIP start by column index; CBC reports its best bound after the solve.
#include "solver/milp.hpp"

#ifdef SATURN_HAVE_CBC
#include <coin/Cbc_C_Interface.h>
#endif

#include <chrono>
#include <cmath>
#include <numeric>

#include "solver/clock.hpp"

namespace saturn::solver {

#ifdef SATURN_HAVE_CBC

MipResult solve_with_cbc(const LinearModel& m, const MipParams& params) {
  const auto t0 = SolverClock::now();
  MipResult out;
  const int nc = m.num_cols(), nr = m.num_rows();
  // Column-major (CSC) matrix.
  std::vector<int> count(static_cast<size_t>(nc) + 1, 0);
  for (int c : m.nz_col) ++count[static_cast<size_t>(c) + 1];
  std::vector<CoinBigIndex> start(static_cast<size_t>(nc) + 1, 0);
  for (int c = 0; c < nc; ++c)
    start[static_cast<size_t>(c) + 1] =
        start[static_cast<size_t>(c)] + count[static_cast<size_t>(c) + 1];
  std::vector<int> index(m.nz_val.size());
  std::vector<double> value(m.nz_val.size());
  std::vector<CoinBigIndex> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < m.nz_val.size(); ++i) {
    const CoinBigIndex at = fill[static_cast<size_t>(m.nz_col[i])]++;
    index[static_cast<size_t>(at)] = m.nz_row[i];
    value[static_cast<size_t>(at)] = m.nz_val[i];
  }
  auto finite = [](std::vector<double> v) {
    for (double& x : v)
      if (std::isinf(x)) x = x > 0 ? 1e30 : -1e30;
    return v;
  };
  const std::vector<double> col_ub = finite(m.col_ub), row_lb = finite(m.row_lb),
                            row_ub = finite(m.row_ub);
  Cbc_Model* model = Cbc_newModel();
  Cbc_loadProblem(model, nc, nr, start.data(), index.data(), value.data(), m.col_lb.data(),
                  col_ub.data(), m.obj.data(), row_lb.data(), row_ub.data());
  Cbc_setObjSense(model, 1.0);
  for (int c = 0; c < nc; ++c)
    if (m.integer[static_cast<size_t>(c)]) Cbc_setInteger(model, c);
  Cbc_setLogLevel(model, params.verbose ? 1 : 0);
  Cbc_setMaximumSeconds(model, std::max(0.5, params.time_limit_s));
  // The objective is integral: a gap below one unit is optimality.
  Cbc_setAllowableGap(model, 1.0 - 1e-6);
  Cbc_setParameter(model, "threads", "1");
  // Wall-clock, not CPU, seconds: on a busy machine CPU time lags and the limit would overrun.
  Cbc_setParameter(model, "timeMode", "elapsed");
  // CBC 2.10's preprocessing crashes in CglPreProcess::postProcess on some of these models
  // (seen when the time limit ends a search on a preprocessed model); the models are small and
  // already tight, so it is off.
  Cbc_setParameter(model, "preprocess", "off");
  if (params.warm) {
    std::vector<int> idx(static_cast<size_t>(nc));
    std::iota(idx.begin(), idx.end(), 0);
    Cbc_setMIPStartI(model, nc, idx.data(), params.warm->data());
  }
  Cbc_solve(model);
  const double* x = Cbc_getColSolution(model);
  const bool has = Cbc_numberSavedSolutions(model) > 0 || (x && Cbc_isProvenOptimal(model));
  const double offset = m.obj_offset;
  out.bound = std::ceil(Cbc_getBestPossibleObjValue(model) + offset - 1e-6);
  if (has && x) {
    out.x.assign(x, x + nc);
    out.objective = Cbc_getObjValue(model) + offset;
    const bool proven = Cbc_isProvenOptimal(model) || out.bound >= out.objective - 1e-6;
    out.status = proven ? MipResult::Status::optimal : MipResult::Status::feasible;
    if (proven) out.bound = out.objective;
    out.detail = Cbc_isSecondsLimitReached(model) ? "time limit" : "";
  } else {
    out.status = MipResult::Status::no_solution;
    out.detail = Cbc_isSecondsLimitReached(model) ? "time limit reached without an integer solution"
                                                  : "no integer solution";
  }
  Cbc_deleteModel(model);
  out.seconds = std::chrono::duration<double>(SolverClock::now() - t0).count();
  return out;
}

#else

MipResult solve_with_cbc(const LinearModel&, const MipParams&) {
  MipResult out;
  out.status = MipResult::Status::error;
  out.detail = "this build has no CBC (install coinor-libcbc-dev and reconfigure)";
  return out;
}

#endif

}  // namespace saturn::solver
