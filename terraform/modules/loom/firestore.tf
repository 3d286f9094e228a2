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
# start event on the execution document, snapshot parts) only cost write time.
# events.seq is monotonic too but stays indexed: each execution's events are an
# index range of their own, read with `seq > n ORDER BY seq`. The sharded store's
# own exemptions (executions.created_at and wake_at among them) are in scale.tf.
# An empty index_config removes every single-field index of the field.
resource "google_firestore_field" "unindexed" {
  for_each = local.unindexed_fields

  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = each.value.collection
  field      = each.value.field

  index_config {}
}

# Composite indexes of the store's listings, every one led by the execution's
# shard (loom_gcp._firestore_shards): a listing runs one query per shard and
# merges them, and the inserts of a busy deployment spread over the shards'
# index ranges instead of landing at the tail of one. By creation time, either
# way (the console, the purge); by status and creation time, either way (the
# sweeper pages oldest first; the purge finds finished executions); by status and
# wake time (overdue timers); by flow (the console).
resource "google_firestore_index" "executions_by_shard_created" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "executions_by_shard_created_asc" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "ASCENDING"
  }
}

resource "google_firestore_index" "executions_by_shard_status_created" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "shard"
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

resource "google_firestore_index" "executions_by_shard_status_created_asc" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "ASCENDING"
  }
}

resource "google_firestore_index" "executions_by_shard_status_wake" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "wake_at"
    order      = "ASCENDING"
  }
}

resource "google_firestore_index" "executions_by_shard_flow_created" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "flow"
    order      = "ASCENDING"
  }
  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "executions_by_shard_flow_status_created" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "executions"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
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
