# The queue every dispatch went to before the queues by class and shard
# (scale.tf). Nothing new is enqueued here; it stays so the tasks already in it
# (timers up to 30 days ahead) are still delivered, and can be removed once it
# is empty. The engine names tasks by a hash of the dispatch id and sets their
# HTTP target (LOOM_TASKS_TARGET_URL) and OIDC token (LOOM_TASKS_SERVICE_ACCOUNT)
# itself; the queue owns rate and retries. A deleted queue name cannot be reused
# for about a week.
resource "google_cloud_tasks_queue" "loom" {
  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-executions"

  rate_limits {
    max_dispatches_per_second = var.task_max_dispatches_per_second
    max_concurrent_dispatches = var.task_max_concurrent_dispatches
  }

  # The handler answers 2xx once an execution is finished, waiting or parked,
  # and 409/503 while another holder is live, so retries only happen while
  # something is still in flight.
  retry_config {
    max_attempts  = var.task_max_attempts
    min_backoff   = "${var.task_min_backoff_seconds}s"
    max_backoff   = "${var.task_max_backoff_seconds}s"
    max_doublings = var.task_max_doublings
  }

  stackdriver_logging_config {
    sampling_ratio = var.task_log_sampling_ratio
  }

  depends_on = [google_project_service.apis]
}
