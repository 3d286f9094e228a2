terraform {
  # 1.11 is the first release with write-only arguments, used for the resume
  # secret so that its value never lands in the state file.
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
}
