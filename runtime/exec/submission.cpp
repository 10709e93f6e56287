#include "runtime/exec/submission.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/workload/config_json.hpp"
#include "runtime/workload/run_workload.hpp"

namespace saturn::exec {

AcceptedSubmission accept_submission(const CoordinatorSetup& setup, const Workload& batch,
                                     const std::vector<Submission>& accepted,
                                     const SpoolRequest& request) {
  // Baselines and --no-replan never re-plan: jobs added to their fixed plan would never start.
  if (!setup.plan_added_jobs || !setup.replan)
    throw InputError(fmt::format(
        "this run executes its first plan as made (policy {}{}): it takes no jobs while it "
        "runs; add them to the workload before starting it",
        setup.policy, setup.replan ? "" : ", --no-replan"));
  AcceptedSubmission a;
  std::vector<Submission> all = accepted;
  all.push_back(request.submission);
  // Their data files must still exist; their contents (one pass over each file, seconds for a
  // large corpus, while the coordinator must go on dispatching) `saturn submit` checked.
  LoadOptions data_exists;
  data_exists.check_data_contents = false;
  a.batch = add_submissions(batch, all, data_exists);
  a.planning = setup.plan_added_jobs(a.batch, batch.jobs.size());
  for (std::size_t j = batch.jobs.size(); j < a.batch.jobs.size(); ++j)
    a.ids.push_back(a.batch.jobs[j].id);
  for (std::size_t k = 0; k < a.planning.jobs.size(); ++k) {
    int measured = 0;
    for (const auto& d : a.planning.details[k]) measured += d.source == "trial" ? 1 : 0;
    a.sources += fmt::format("{}{} ({} of {} configurations measured by trials)",
                             a.sources.empty() ? "" : ", ", a.planning.jobs[k].id, measured,
                             a.planning.details[k].size());
  }
  // Named in the order accepted (a resumed run adds them back in name order; a request's own
  // name carries its submitting host's clock, which may lag another's).
  record_accepted_submission(setup.run_dir,
                             accepted_name(accepted.size() + 1, request.file.filename().string()),
                             request.submission, a.ids);
  return a;
}

}  // namespace saturn::exec
