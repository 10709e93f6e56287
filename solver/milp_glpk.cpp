// GLPK backend. Facts measured here (DESIGN.md, solver notes): the warm start goes in only
// through the branch-and-cut callback (GLP_IHEUR -> glp_ios_heur_sol), which needs the MIP
// presolver off and therefore an optimal LP relaxation from glp_simplex first; the best bound
// can only be read inside the callback, so it is recorded there.
#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "solver/clock.hpp"
#include "solver/milp.hpp"

namespace saturn::solver {

namespace {

struct Callback {
  SolverClock::time_point deadline;
  const std::vector<double>* warm = nullptr;
  bool warm_given = false;
  double bound = -std::numeric_limits<double>::infinity();
  int iterations = 0;  // simplex iterations counted as work so far
};

void on_event(glp_tree* tree, void* info) {
  auto* cb = static_cast<Callback*>(info);
  // The work since the last call: its simplex iterations (the branch and bound's work).
  const int it = glp_get_it_cnt(glp_ios_get_prob(tree));
  SolverClock::tick(SolverClock::kBranchCallbackUnits +
                    SolverClock::kSimplexIterationUnits * (it - cb->iterations));
  cb->iterations = it;
  if (glp_ios_reason(tree) == GLP_IHEUR && cb->warm && !cb->warm_given) {
    // glp_ios_heur_sol takes x[1..n] and does not check feasibility: solve_milp checked it.
    std::vector<double> x(cb->warm->size() + 1, 0.0);
    std::copy(cb->warm->begin(), cb->warm->end(), x.begin() + 1);
    glp_ios_heur_sol(tree, x.data());
    cb->warm_given = true;
  }
  const int best = glp_ios_best_node(tree);
  if (best != 0) {
    const double b = glp_ios_node_bound(tree, best);
    if (std::isfinite(b) && std::fabs(b) < 1e300) cb->bound = std::max(cb->bound, b);
  }
  // GLPK checks its own time limit only between subproblems; check the wall clock at every
  // callback too.
  if (SolverClock::now() > cb->deadline) {
    glp_ios_terminate(tree);
    return;
  }
  // The objective is integral: an incumbent within one unit of the bound is optimal.
  glp_prob* prob = glp_ios_get_prob(tree);
  if (glp_mip_status(prob) == GLP_FEAS || glp_mip_status(prob) == GLP_OPT) {
    const double inc = glp_mip_obj_val(prob);
    if (std::ceil(cb->bound - 1e-6) >= inc - 1e-6) glp_ios_terminate(tree);
  }
}

}  // namespace

void release_glpk_thread() {
  glp_free_env();
}

MipResult solve_with_glpk(const LinearModel& m, const MipParams& params) {
  const auto t0 = SolverClock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(SolverClock::now() - t0).count(); };
  MipResult out;
  glp_term_out(params.verbose ? GLP_ON : GLP_OFF);
  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  const int nc = m.num_cols(), nr = m.num_rows();
  if (nr > 0) glp_add_rows(lp, nr);
  if (nc > 0) glp_add_cols(lp, nc);
  for (int r = 0; r < nr; ++r) {
    const double lo = m.row_lb[static_cast<size_t>(r)], up = m.row_ub[static_cast<size_t>(r)];
    int type = GLP_FR;
    if (std::isfinite(lo) && std::isfinite(up))
      type = lo == up ? GLP_FX : GLP_DB;
    else if (std::isfinite(lo))
      type = GLP_LO;
    else if (std::isfinite(up))
      type = GLP_UP;
    glp_set_row_bnds(lp, r + 1, type, std::isfinite(lo) ? lo : 0.0, std::isfinite(up) ? up : 0.0);
  }
  for (int c = 0; c < nc; ++c) {
    const size_t cu = static_cast<size_t>(c);
    const double lo = m.col_lb[cu], up = m.col_ub[cu];
    int type = GLP_LO;
    if (std::isfinite(up)) type = lo == up ? GLP_FX : GLP_DB;
    glp_set_col_bnds(lp, c + 1, type, lo, std::isfinite(up) ? up : 0.0);
    glp_set_obj_coef(lp, c + 1, m.obj[cu]);
    if (m.integer[cu]) glp_set_col_kind(lp, c + 1, lo == 0.0 && up == 1.0 ? GLP_BV : GLP_IV);
  }
  glp_set_obj_coef(lp, 0, m.obj_offset);
  // GLPK arrays are 1-based.
  std::vector<int> ia(m.nz_val.size() + 1), ja(m.nz_val.size() + 1);
  std::vector<double> ar(m.nz_val.size() + 1);
  for (size_t i = 0; i < m.nz_val.size(); ++i) {
    ia[i + 1] = m.nz_row[i] + 1;
    ja[i + 1] = m.nz_col[i] + 1;
    ar[i + 1] = m.nz_val[i];
  }
  glp_load_matrix(lp, static_cast<int>(m.nz_val.size()), ia.data(), ja.data(), ar.data());

  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = params.verbose ? GLP_MSG_ON : GLP_MSG_OFF;
  smcp.presolve = GLP_OFF;
  smcp.tm_lim = static_cast<int>(
      std::min(2e9, std::max(1.0, SolverClock::backend_limit_s(params.time_limit_s) * 1000.0)));
  const int lp_rc = glp_simplex(lp, &smcp);
  SolverClock::tick(SolverClock::kSimplexCallUnits +
                    SolverClock::kSimplexIterationUnits * glp_get_it_cnt(lp));
  if (lp_rc == GLP_ETMLIM) SolverClock::backend_timed_out();
  if (lp_rc != 0 || glp_get_status(lp) != GLP_OPT) {
    out.status = MipResult::Status::no_solution;
    out.detail = lp_rc == GLP_ETMLIM ? "time limit reached in the LP relaxation"
                                     : "the LP relaxation was not solved";
    out.seconds = elapsed();
    glp_delete_prob(lp);
    return out;
  }
  Callback cb;
  cb.deadline = t0 + std::chrono::microseconds(static_cast<long long>(params.time_limit_s * 1e6));
  cb.warm = params.warm;
  cb.bound = glp_get_obj_val(lp);
  cb.iterations = glp_get_it_cnt(lp);
  glp_iocp iocp;
  glp_init_iocp(&iocp);
  iocp.msg_lev = params.verbose ? GLP_MSG_ON : GLP_MSG_OFF;
  iocp.presolve = GLP_OFF;
  iocp.cb_func = on_event;
  iocp.cb_info = &cb;
  // No MIR cuts: GLPK generates them at the root without calling back, so they can overrun the
  // time limit, and they raised no bound on the benchmark models.
  iocp.mir_cuts = GLP_OFF;
  iocp.cov_cuts = GLP_ON;
  iocp.clq_cuts = GLP_ON;
  iocp.br_tech = GLP_BR_DTH;
  iocp.bt_tech = GLP_BT_BLB;
  const double left = params.time_limit_s - elapsed();
  iocp.tm_lim =
      static_cast<int>(std::min(2e9, std::max(1.0, SolverClock::backend_limit_s(left) * 1000.0)));
  const int rc = left > 0 ? glp_intopt(lp, &iocp) : GLP_ETMLIM;
  // GLPK's own (wall) limit: under the work basis, the wall cap.
  if (rc == GLP_ETMLIM && left > 0) SolverClock::backend_timed_out();
  const int st = glp_mip_status(lp);
  if (st == GLP_OPT || st == GLP_FEAS) {
    out.objective = glp_mip_obj_val(lp);
    out.x.resize(static_cast<size_t>(nc));
    for (int c = 0; c < nc; ++c) out.x[static_cast<size_t>(c)] = glp_mip_col_val(lp, c + 1);
    const bool proven =
        (rc == 0 && st == GLP_OPT) || std::ceil(cb.bound - 1e-6) >= out.objective - 1e-6;
    out.status = proven ? MipResult::Status::optimal : MipResult::Status::feasible;
    out.bound = proven ? out.objective : std::ceil(cb.bound - 1e-6);
    out.detail = proven ? "" : "time limit";
  } else {
    out.status = MipResult::Status::no_solution;
    out.bound = std::ceil(cb.bound - 1e-6);
    out.detail = rc == GLP_ETMLIM || rc == GLP_ESTOP
                     ? "time limit reached without an integer solution"
                     : "no integer solution";
  }
  out.seconds = elapsed();
  glp_delete_prob(lp);
  return out;
}

}  // namespace saturn::solver
