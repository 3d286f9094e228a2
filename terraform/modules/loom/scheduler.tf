# The sweeper redispatches executions whose claim expired or whose timer is
# due, so that no execution is ever stranded.
resource "google_cloud_scheduler_job" "sweep" {
  project          = var.project_id
  region           = var.region
  name             = "${var.name_prefix}-sweep"
  description      = "POST /tasks/sweep on the Loom tasks service."
  schedule         = var.sweep_schedule
  time_zone        = var.sweep_time_zone
  attempt_deadline = "${var.sweep_deadline_seconds}s"

  retry_config {
    retry_count = 1
  }

  http_target {
    http_method = "POST"
    uri         = "${google_cloud_run_v2_service.loom["tasks"].uri}/tasks/sweep"
    body        = base64encode("{}")
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = local.tasks_url # what the tasks service's caller check accepts
    }
  }

  depends_on = [
    google_project_service.apis,
    google_cloud_run_v2_service_iam_member.invoker_tasks,
  ]
}

# Retention: deletes finished executions older than var.retention_days with
# their events, snapshots and payload blobs, in bounded batches. A run that
# runs out of time leaves the rest to the next one (the purge is resumable and
# idempotent). Firestore's TTL on expire_at is only a later backstop.
resource "google_cloud_scheduler_job" "purge" {
  project          = var.project_id
  region           = var.region
  name             = "${var.name_prefix}-purge"
  description      = "POST /tasks/purge on the Loom tasks service."
  schedule         = var.purge_schedule
  time_zone        = var.sweep_time_zone
  attempt_deadline = "${var.sweep_deadline_seconds}s"

  retry_config {
    retry_count = 1
  }

  http_target {
    http_method = "POST"
    uri         = "${google_cloud_run_v2_service.loom["tasks"].uri}/tasks/purge"
    body        = base64encode("{}")
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = local.tasks_url # what the tasks service's caller check accepts
    }
  }

  depends_on = [
    google_project_service.apis,
    google_cloud_run_v2_service_iam_member.invoker_tasks,
  ]
}
