namespace Hpc.CommonData.Cache;

/// <summary>The dataset or version is not in the cache tier; the message names it and the hosts asked.</summary>
public sealed class DatasetNotFoundException(string message) : Exception(message);

/// <summary>Bytes failed verification (checksum, length or content hash). They were never handed to a caller.</summary>
public sealed class DataIntegrityException(string message) : Exception(message);
