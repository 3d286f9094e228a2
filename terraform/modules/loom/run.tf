resource "google_cloud_run_v2_service" "loom" {
  for_each = local.services

  project             = var.project_id
  location            = var.region
  name                = "${var.name_prefix}-${each.key}"
  description         = "Loom functions-framework target '${each.key}'."
  ingress             = each.value.ingress
  deletion_protection = var.deletion_protection
  labels              = local.labels

  template {
    service_account                  = local.service_accounts[each.key]
    timeout                          = "${var.request_timeout_seconds}s"
    max_instance_request_concurrency = var.max_concurrency
    execution_environment            = "EXECUTION_ENVIRONMENT_GEN2"
    labels                           = local.labels

    scaling {
      # Scale to zero: an idle Loom costs nothing but storage.
      min_instance_count = 0
      max_instance_count = var.max_instance_count
    }

    containers {
      image = var.image

      ports {
        container_port = 8080
      }

      # HTTP targets only (events is a CloudEvent function). Traffic waits for /health
      # (the app loads, the store answers); a hung process is restarted via /live, which
      # checks nothing else, so a store outage never restarts healthy instances.
      dynamic "startup_probe" {
        for_each = each.key == "events" ? [] : ["/health"]
        content {
          period_seconds    = 2
          timeout_seconds   = 2
          failure_threshold = 60
          http_get {
            path = startup_probe.value
            port = 8080
          }
        }
      }
      dynamic "liveness_probe" {
        for_each = each.key == "events" ? [] : ["/live"]
        content {
          period_seconds    = 30
          timeout_seconds   = 5
          failure_threshold = 3
          http_get {
            path = liveness_probe.value
            port = 8080
          }
        }
      }

      resources {
        # Request-based CPU: the engine does no work after it has answered.
        cpu_idle          = true
        startup_cpu_boost = true
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
      }

      env {
        name  = "FUNCTION_TARGET"
        value = each.key
      }
      env {
        name  = "LOOM_APP"
        value = var.loom_app
      }
      env {
        name  = "LOOM_STORE"
        value = "firestore://${var.project_id}/${google_firestore_database.loom.name}"
      }
      env {
        name  = "LOOM_DISPATCH"
        value = "cloudtasks://projects/${var.project_id}/locations/${var.region}/queues/${google_cloud_tasks_queue.loom.name}"
      }
      env {
        name  = "LOOM_TASKS_TARGET_URL"
        value = local.tasks_url
      }
      env {
        name  = "LOOM_TASKS_SERVICE_ACCOUNT"
        value = google_service_account.invoker.email
      }
      env {
        name  = "LOOM_BLOBS"
        value = "gs://${google_storage_bucket.payloads.name}/${var.payload_prefix}"
      }
      env {
        name  = "LOOM_LOG_FORMAT"
        value = "json"
      }
      env {
        # functions-framework's gunicorn serves THREADS requests at once and every execute
        # holds its thread to the end: as many threads as Cloud Run sends requests, and two
        # kept for the probes (loom.workers.admission), so they answer while the store hangs.
        name  = "THREADS"
        value = local.request_threads
      }
      env {
        # The caller check: every request's Google ID token, verified in the service behind
        # Cloud Run IAM (loom_gcp.auth). Empty (no check) on events, or with caller_check off.
        name  = "LOOM_CALLER_AUTH"
        value = contains(local.caller_checked, each.key) ? "loom_gcp.auth:google_id_token" : ""
      }
      env {
        name  = "LOOM_AUTH_AUDIENCE"
        value = join(",", local.caller_audiences[each.key])
      }
      env {
        name  = "LOOM_AUTH_PRINCIPALS"
        value = join(",", local.caller_principals[each.key])
      }
      env {
        # No service admits a public invoker: whatever reaches the container passed Cloud
        # Run IAM with the token it carried, so that token is the credential (gcloud run
        # services proxy's included, whose signature Cloud Run removes).
        name  = "LOOM_AUTH_TRUST_CLOUD_RUN"
        value = "true"
      }
      env {
        # Who may grant which capabilities (and raise which limits): nobody, unless set.
        name  = "LOOM_GRANTS"
        value = jsonencode(var.grant_policy)
      }
      env {
        # How long Cloud Tasks waits for one attempt: the dispatcher stamps it on every task
        # (the precondition below keeps it within the request timeout).
        name  = "LOOM_TASKS_DISPATCH_DEADLINE"
        value = var.dispatch_deadline_seconds
      }
      env {
        # POST /tasks/purge deletes finished executions older than this.
        name  = "LOOM_RETENTION"
        value = "${var.retention_days}d"
      }
      env {
        # Firestore's TTL (expire_at) is a backstop that must not run before the purge:
        # it deletes only the execution document, leaving events and blobs behind.
        name  = "LOOM_TTL_DAYS"
        value = var.retention_days + 7
      }
      env {
        # Logs name their trace projects/PROJECT/traces/TRACE so Cloud Logging links them.
        name  = "GOOGLE_CLOUD_PROJECT"
        value = var.project_id
      }
      # Only the services that check resumes, verdicts or signed messages read it.
      dynamic "env" {
        for_each = contains(local.secret_readers, each.key) ? ["LOOM_RESUME_SECRET"] : []
        content {
          name = env.value
          value_source {
            secret_key_ref {
              secret  = google_secret_manager_secret.resume.secret_id
              version = "latest"
            }
          }
        }
      }
    }
  }

  lifecycle {
    # Cloud Build rolls out new images with gcloud run deploy (docs/adr/0010);
    # Terraform owns everything else about the services.
    ignore_changes = [
      template[0].containers[0].image,
      client,
      client_version,
    ]

    precondition {
      condition     = var.request_timeout_seconds >= var.dispatch_deadline_seconds
      error_message = "request_timeout_seconds must be >= dispatch_deadline_seconds, or Cloud Run cuts requests that Cloud Tasks still waits for."
    }

    precondition {
      condition     = var.request_timeout_seconds >= var.sweep_deadline_seconds
      error_message = "request_timeout_seconds must be >= sweep_deadline_seconds."
    }

    precondition {
      condition     = !contains(local.caller_checked, each.key) || length(local.caller_principals[each.key]) > 0
      error_message = "The caller check admits nobody: set worker_invokers (user: or serviceAccount: members), console_operators or caller_principals, or caller_check = false."
    }
  }

  depends_on = [
    google_project_service.apis,
    google_secret_manager_secret_iam_member.runtime_resume_secret,
    google_secret_manager_secret_version.resume,
  ]
}
