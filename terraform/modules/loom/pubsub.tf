# Messages on this topic start or resume executions: Pub/Sub pushes them to
# the events service, which functions-framework turns into CloudEvents.
resource "google_pubsub_topic" "events" {
  project = var.project_id
  name    = "${var.name_prefix}-events"
  labels  = local.labels

  depends_on = [google_project_service.apis]
}

# Messages the events service kept refusing end here instead of being retried
# for the whole retention period.
resource "google_pubsub_topic" "events_dead_letter" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-events-dead-letter"
  labels                     = local.labels
  message_retention_duration = "604800s"

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_subscription" "events_push" {
  project = var.project_id
  name    = "${var.name_prefix}-events-push"
  topic   = google_pubsub_topic.events.id
  labels  = local.labels

  # Pub/Sub waits at most 600 s for a push endpoint.
  ack_deadline_seconds       = min(var.request_timeout_seconds, 600)
  message_retention_duration = "604800s"

  push_config {
    push_endpoint = google_cloud_run_v2_service.loom["events"].uri

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = google_cloud_run_v2_service.loom["events"].uri
    }
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.events_dead_letter.id
    max_delivery_attempts = var.pubsub_max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [google_cloud_run_v2_service_iam_member.invoker_events]
}
