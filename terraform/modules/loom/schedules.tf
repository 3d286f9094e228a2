# The app's schedules (app.schedule(...) in Python) all fire from this one job:
# every minute it POSTs /tasks/schedules on the tasks service, which works out
# from its own clock which ticks are due and starts each as the execution
# schedule:{name}@{tick}, so a tick delivered twice or late starts one
# execution. Declaring, changing or removing a schedule is a code deploy; no
# terraform apply is needed. Set schedules_enabled = false for an app without
# schedules to save the minutely request.
resource "google_cloud_scheduler_job" "schedules" {
  count            = var.schedules_enabled ? 1 : 0
  project          = var.project_id
  region           = var.region
  name             = "${var.name_prefix}-schedules"
  description      = "POST /tasks/schedules on the Loom tasks service: the tick of the app's schedules."
  schedule         = "* * * * *"
  time_zone        = "Etc/UTC"
  attempt_deadline = "${var.sweep_deadline_seconds}s"

  # A lost tick is covered by the next one: a pass starts every tick of the last
  # five minutes that has no execution yet (LOOM_SCHEDULE_GRACE).
  retry_config {
    retry_count = 1
  }

  http_target {
    http_method = "POST"
    uri         = "${google_cloud_run_v2_service.loom["tasks"].uri}/tasks/schedules"
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
