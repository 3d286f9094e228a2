resource "google_firestore_database" "loom" {
  project     = var.project_id
  name        = var.firestore_database
  location_id = local.firestore_location
  type        = "FIRESTORE_NATIVE"

  # Appends are lock-free create() batches, not transactions.
  concurrency_mode            = "OPTIMISTIC"
  app_engine_integration_mode = "DISABLED"

  delete_protection_state = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy         = var.deletion_protection ? "ABANDON" : "DELETE"

  depends_on = [google_project_service.apis]
}

# Finished executions carry expire_at; Firestore deletes them (and only them)
# after that time. The field is never queried, so it is not indexed either.
resource "google_firestore_field" "executions_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"
  field      = "expire_at"

  ttl_config {}

  index_config {}
}

# Fields the store never queries lose their single-field indexes: timestamps
# that only grow would hot-spot them, and large fields (event pages' bodies, the
# start event on the execution document, snapshot parts) only cost write time. events.seq and executions.created_at are
# monotonic too but stay indexed: the store reads the log with
# `seq > n ORDER BY seq` and lists executions by created_at. An empty
# index_config removes every single-field index of the field.
resource "google_firestore_field" "unindexed" {
  for_each = local.unindexed_fields

  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = each.value.collection
  field      = each.value.field

  index_config {}
}

# Composite indexes of the store's listings (FirestoreEventStore.list): by
# status, newest first; by status, oldest first (the sweeper pages through
# every running execution with a (created_at, id) cursor); and by status, due
# timers first (the sweeper's overdue timers).
resource "google_firestore_index" "executions_by_status_created" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "executions_by_status_created_asc" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "ASCENDING"
  }
}

resource "google_firestore_index" "executions_by_status_wake" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "wake_at"
    order      = "ASCENDING"
  }
}

# The web console's listings (FirestoreEventStore.browse): executions of one
# flow newest first, with or without a status.
resource "google_firestore_index" "executions_by_flow_created" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "flow"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "executions_by_flow_status_created" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "flow"
    order      = "ASCENDING"
  }
  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}
