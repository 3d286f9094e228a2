# Shared secret of the resume/verdict authenticator (LOOM_RESUME_SECRET).
resource "google_secret_manager_secret" "resume" {
  project   = var.project_id
  secret_id = "${var.name_prefix}-resume-secret"
  labels    = local.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

# Generated at apply time and written through a write-only argument, so the
# value is neither in the plan nor in the state. Bump resume_secret_version to
# rotate; new instances read the latest version.
ephemeral "random_password" "resume" {
  length  = 48
  special = false
}

resource "google_secret_manager_secret_version" "resume" {
  secret                 = google_secret_manager_secret.resume.id
  secret_data_wo         = ephemeral.random_password.resume.result
  secret_data_wo_version = var.resume_secret_version
}
