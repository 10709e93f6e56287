#include "runtime/exec/planning.hpp"

#include "runtime/core/log.hpp"

namespace saturn::exec {

namespace {

profile::ProfileRequest profile_request(const PlanningRequest& request) {
  profile::ProfileRequest pr;
  pr.workload = request.workload;
  pr.cluster = request.ranks->cluster;
  pr.device_rank = request.ranks->device_rank;
  pr.steps = request.remaining_steps;
  pr.resources = request.resources;
  pr.checkpoint_writes = request.checkpoint_writes;
  pr.measure_checkpoint_writes = request.measure_checkpoint_writes;
  pr.checkpoint_file_system = request.checkpoint_file_system;
  return pr;
}

profile::ProfileOptions profile_options(const PlanningRequest& request) {
  profile::ProfileOptions opts;
  opts.store = request.store;
  opts.trials = request.trials;
  opts.calibration.quick = request.quick_calibration;
  opts.current_practice = request.current_practice;
  // Trials run in pools of the sizes the jobs will get, so an estimate that is wrong about
  // memory fails its trial instead of the job.
  opts.trial.resources = request.resources;
  // Calibrate once per hardware, not once per run directory (SATURN_CALIBRATION_CACHE=none
  // turns the shared cache off).
  opts.calibration_cache = profile::default_calibration_cache();
  return opts;
}

}  // namespace

PlanningInput build_planning_input(const PlanningRequest& request, comm::Communicator& world,
                                   profile::ProfileResult* startup) {
  const profile::ProfileRequest pr = profile_request(request);
  profile::ProfileOptions opts = profile_options(request);
  opts.quiet = world.rank() != 0;
  const profile::ProfileResult result = profile::profile_workload(pr, world, opts);
  if (world.rank() == 0) {
    const auto& st = result.stats;
    log::info(
        "profiles: {} configurations estimated for {} job shapes, {} trials run ({} "
        "infeasible in reality), {} reused from {} in {:.1f} s",
        st.configs, st.signatures, st.trials_run, st.trials_failed, st.trials_reused,
        request.store.string(), st.total_s);
  }
  PlanningInput in;
  in.jobs = result.jobs;
  in.details = result.details;
  if (startup != nullptr) *startup = result;
  return in;
}

AddedJobPlanner::AddedJobPlanner(PlanningRequest request, const profile::ProfileResult& startup)
    : request_(std::move(request)),
      store_(profile::ProfileStore::load(request_.store)),
      hardware_(startup.hardware),
      calibration_(startup.calibration) {}

PlanningInput AddedJobPlanner::plan(const Workload& workload, std::size_t first) const {
  PlanningRequest r = request_;
  r.workload = &workload;
  r.remaining_steps.assign(workload.jobs.size(), 0);
  for (std::size_t j = first; j < workload.jobs.size(); ++j)
    r.remaining_steps[j] = workload.jobs[j].train.steps;
  const profile::ProfileResult result = profile::profile_added_jobs(
      profile_request(r), profile_options(r), store_, hardware_, calibration_);
  PlanningInput in;
  in.jobs = result.jobs;
  in.details = result.details;
  return in;
}

}  // namespace saturn::exec
