"""Read-side export: backup format, display renderings, session selection and safe file names."""
