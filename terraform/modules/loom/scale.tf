# One deployment at scale (docs/operations/limits.md): Cloud Tasks queues by class
# and by shard, and the Firestore indexes and exemptions the sharded store needs.

locals {
  task_queue_counts = {
    executions  = var.task_queues_executions
    timers      = var.task_queues_timers
    admission   = var.task_queues_admission
    maintenance = var.task_queues_maintenance
  }

  # The queue family: {prefix}-{class}-{i}, as loom_gcp._task_queues names them.
  task_queue_family = merge([
    for class, count in local.task_queue_counts : {
      for i in range(count) : "${class}-${i}" => { class = class, index = i }
    }
  ]...)

  # Every service identity may enqueue on every queue of the family (and nothing else).
  family_enqueuers = {
    for pair in setproduct(keys(local.services), keys(local.task_queue_family)) :
    "${pair[0]}/${pair[1]}" => { service = pair[0], queue = pair[1] }
  }

  # Single-field indexes the sharded store never uses: its ordered queries all go through
  # composite indexes led by shard. Left on, created_at and wake_at (monotonic) would put
  # every start at the tail of one index range; the lease maps and times change on every
  # grant; an inbox item's time would take a parent's children's results in bursts.
  sharded_unindexed = {
    "executions.created_at" = { collection = "executions", field = "created_at" }
    "executions.wake_at"    = { collection = "executions", field = "wake_at" }
    "shards.leases"         = { collection = "shards", field = "leases" }
    "shards.grants"         = { collection = "shards", field = "grants" }
    "leases.e"              = { collection = "leases", field = "e" }
    "inbox.at"              = { collection = "inbox", field = "at" }
    "inbox.body"            = { collection = "inbox", field = "body" }
  }
}

resource "google_cloud_tasks_queue" "family" {
  for_each = local.task_queue_family

  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-${each.key}"

  rate_limits {
    max_dispatches_per_second = var.task_max_dispatches_per_second
    max_concurrent_dispatches = var.task_max_concurrent_dispatches
  }

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

resource "google_cloud_tasks_queue_iam_member" "family_enqueuer" {
  for_each = local.family_enqueuers

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.family[each.value.queue].name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${local.service_accounts[each.value.service]}"
}

resource "google_firestore_field" "sharded_unindexed" {
  for_each = local.sharded_unindexed

  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = each.value.collection
  field      = each.value.field

  index_config {}
}

# Event pages written by an execution's last append carry expire_at too: the TTL
# backstop then deletes them with the execution document, not only the document.
resource "google_firestore_field" "events_expire_at" {
  project    = var.project_id
  database   = google_firestore_database.loom.name
  collection = "events"
  field      = "expire_at"

  ttl_config {}

  index_config {}
}

# The sweep's search for inboxes left undrained: every inbox item, by shard and age.
resource "google_firestore_index" "inbox_by_shard_at" {
  project     = var.project_id
  database    = google_firestore_database.loom.name
  collection  = "inbox"
  query_scope = "COLLECTION_GROUP"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = "at"
    order      = "ASCENDING"
  }
}
