# Payloads over the inline size limit (claim checks, LOOM_BLOBS).
resource "google_storage_bucket" "payloads" {
  project                     = var.project_id
  name                        = "${var.project_id}-${var.name_prefix}-payloads"
  location                    = local.storage_location
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection
  labels                      = local.labels

  lifecycle_rule {
    condition {
      age = var.payload_retention_days
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# Source archives uploaded by `gcloud builds submit` for the deployer's builds.
resource "google_storage_bucket" "build_sources" {
  project                     = var.project_id
  name                        = "${var.project_id}-${var.name_prefix}-build-sources"
  location                    = local.storage_location
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true
  labels                      = local.labels

  lifecycle_rule {
    condition {
      age = 7
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}
