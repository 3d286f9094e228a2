terraform {
  required_version = ">= 1.11.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.25.0, < 8.0.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.7.0, < 4.0.0"
    }
  }

  # Keep the state in a bucket for anything but a trial:
  # backend "gcs" {
  #   bucket = "YOUR-STATE-BUCKET"
  #   prefix = "loom/example"
  # }
}
