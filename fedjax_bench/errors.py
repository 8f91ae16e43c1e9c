"""Errors that the command line turns into a one-line message and exit status 2."""


class UsageError(ValueError):
  """Bad input: an unknown name, an impossible size, a flag that cannot apply."""


class DataMissingError(UsageError):
  """A dataset is neither cached nor in the TFDS data dir, and cannot be fetched."""
