namespace Hpc.CommonData.Cache;

/// <summary>
/// What an account may do on a cache host. Each role includes the one before it.
/// </summary>
public enum CacheRole
{
    /// <summary>Read segments, manifests and counters: node agents and direct-mode workers.</summary>
    Reader = 1,
    /// <summary>Also store segments and versions, set lifetimes, and keep its own bookkeeping (staging leases, job
    /// pins): the stager and job submission.</summary>
    Writer = 2,
    /// <summary>Also delete anything: removing versions, segment collection, FLUSHALL.</summary>
    Admin = 3,
}
