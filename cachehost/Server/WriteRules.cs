using System.Buffers;
using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.CacheHost.Storage;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Server;

/// <summary>What a writer's key-changing command may do.</summary>
internal enum WriteVerdict
{
    /// <summary>Run the command as it is.</summary>
    Allowed,
    /// <summary>Refused; the reason is the reply.</summary>
    Refused,
    /// <summary>The key already holds exactly these content-addressed bytes: nothing to store (see <see cref="WriteRules.Set"/>).</summary>
    AlreadyHeld,
}

/// <summary>
/// The per-dataset rules a host with accounts applies to writers (administrators are not limited, and an open host has
/// only administrators). Who owns a dataset name is configuration — the users file's <c>names</c> lines, see
/// <see cref="CacheUser.Owns"/> — never a record the first writer leaves, so every host with the same users file gives
/// the same answer before and after a restart, and a refused command changes nothing. Segments and manifests are
/// content-addressed and shared by every dataset holding the same bytes, so a writer may add them only with the bytes
/// their id names, never replace them, and only lengthen their life. Bookkeeping keys (job references, locks, staging
/// leases, removal records) belong to the account they name and always expire. Keys outside <c>hcd:</c> are not this
/// system's: writers may store them within the host's --foreign-key-quota, all writers together.
/// </summary>
internal static class WriteRules
{
    private enum KeyKind { Foreign, Segment, Manifest, Latest, JobReference, Lock, Staging, Removed, HostOnly, Malformed }

    /// <summary>
    /// The longest life a writer may give a lock: a holder that dies frees the version within it. Never renewed (see
    /// <see cref="LockLedger"/> for taking it again).
    /// </summary>
    public const long MaxLockMs = 15_000;
    /// <summary>The longest life a writer may give a staging lease (renewed while the stage runs).</summary>
    public const long MaxLeaseMs = 10 * 60_000;
    /// <summary>The longest life a writer may give a job reference or a removal record.</summary>
    public static readonly long MaxRecordMs = (long)CacheKeys.RecordLifetime.TotalMilliseconds;

    private static readonly byte[] Prefix = "hcd:"u8.ToArray();
    private static readonly byte[] Segment = Encoding.ASCII.GetBytes(CacheKeys.SegmentPrefix);
    private static readonly byte[] ManifestKey = Encoding.ASCII.GetBytes(CacheKeys.ManifestPrefix);
    private static readonly byte[] Latest = Encoding.ASCII.GetBytes(CacheKeys.LatestPrefix);
    private static readonly byte[] Jobs = Encoding.ASCII.GetBytes(CacheKeys.JobsPrefix);
    private static readonly byte[] LockKey = Encoding.ASCII.GetBytes(CacheKeys.LockPrefix);
    private static readonly byte[] StagingKey = Encoding.ASCII.GetBytes(CacheKeys.StagingPrefix);
    private static readonly byte[] RemovedKey = Encoding.ASCII.GetBytes(CacheKeys.RemovedPrefix);

    /// <summary>
    /// What a key is. <paramref name="id"/>: a segment's, manifest's, lock's or removal record's id;
    /// <paramref name="name"/>: a pointer's dataset, or the account a job reference or staging lease names.
    /// </summary>
    private static KeyKind Classify(ReadOnlySpan<byte> key, out SegmentId id, out string? name)
    {
        id = default;
        name = null;
        if (!key.StartsWith(Prefix)) return KeyKind.Foreign;
        if (key.StartsWith(Segment)) return TryId(key[Segment.Length..], out id) ? KeyKind.Segment : KeyKind.Malformed;
        if (key.StartsWith(ManifestKey)) return TryId(key[ManifestKey.Length..], out id) ? KeyKind.Manifest : KeyKind.Malformed;
        if (key.StartsWith(LockKey)) return TryId(key[LockKey.Length..], out id) ? KeyKind.Lock : KeyKind.Malformed;
        if (key.StartsWith(RemovedKey)) return TryId(key[RemovedKey.Length..], out id) ? KeyKind.Removed : KeyKind.Malformed;
        if (key.StartsWith(Latest))
        {
            name = Encoding.UTF8.GetString(key[Latest.Length..]);
            return DatasetName.TryValidate(name, out _) ? KeyKind.Latest : KeyKind.Malformed;
        }
        if (key.StartsWith(Jobs))
            return CacheKeys.TryParseJobReference(Encoding.UTF8.GetString(key), out var version, out var account, out _)
                   && SegmentId.TryParse(version, out id) && (name = account) is not null ? KeyKind.JobReference : KeyKind.Malformed;
        if (key.StartsWith(StagingKey))
            return CacheKeys.TryParseStagingLease(Encoding.UTF8.GetString(key), out var owner) && (name = owner) is not null ? KeyKind.Staging : KeyKind.Malformed;
        // The collection flag and anything not yet defined: administrators only.
        return KeyKind.HostOnly;
    }

    private static bool TryId(ReadOnlySpan<byte> hex, out SegmentId id)
    {
        id = default;
        // One key per id: lower-case hex only, so an upper-case spelling cannot store the same content a second time.
        foreach (var c in hex)
            if (c is not ((>= (byte)'0' and <= (byte)'9') or (>= (byte)'a' and <= (byte)'f'))) return false;
        return hex.Length == SegmentId.HexLength && SegmentId.TryParse(Encoding.ASCII.GetString(hex), out id);
    }

    /// <summary>
    /// <c>SET key value</c> by a writer (<paramref name="onlyIfAbsent"/>: with NX; <paramref name="ttlMs"/>: its EX/PX,
    /// 0 for none). <see cref="WriteVerdict.AlreadyHeld"/>: the key holds these very bytes already.
    /// </summary>
    public static WriteVerdict Set(CacheStore store, CacheUser user, ReadOnlySpan<byte> key, in ReadOnlySequence<byte> value,
        bool onlyIfAbsent, long ttlMs, long foreignQuota, out string? refusal)
    {
        refusal = null;
        var kind = Classify(key, out var id, out var name);
        switch (kind)
        {
            case KeyKind.Foreign:
                refusal = CheckForeignQuota(store, user, key, value.Length, foreignQuota);
                break;
            case KeyKind.Latest:
                refusal = CheckOwner(user, name!) ?? CheckPointer(store, name!, value);
                break;
            case KeyKind.Segment:
            case KeyKind.Manifest:
                if (store.TryPeek(key, out var held))
                {
                    if (value.Length == held.Length && SequenceEquals(value, held)) return WriteVerdict.AlreadyHeld;
                    // SET NX of other bytes stores nothing and says so; only an actual replacement is refused.
                    if (onlyIfAbsent) return WriteVerdict.Allowed;
                    refusal = $"NOPERM {KeyText(key)} is content-addressed and holds other bytes: a writer cannot replace it";
                    return WriteVerdict.Refused;
                }
                refusal = CheckContent(user, key, id, value);
                break;
            case KeyKind.JobReference:
            case KeyKind.Staging:
                refusal = CheckAccount(user, key, name!) ?? CheckLife(user, key, kind, ttlMs);
                break;
            case KeyKind.Lock:
                refusal = !onlyIfAbsent ? $"NOPERM User {user.Name} may take {KeyText(key)} only with SET NX: a lock is never taken over"
                    : !Holds(user, value) ? $"NOPERM a lock's value starts with its holder's account and a colon ({user.Name}:...)"
                    : CheckLife(user, key, kind, ttlMs);
                break;
            case KeyKind.Removed:
                var named = Encoding.UTF8.GetString(value.Length <= 256 ? value.ToArray() : []);
                refusal = !DatasetName.TryValidate(named, out _) ? $"NOPERM a removal record's value is the removed version's dataset name"
                    : CheckOwner(user, named) ?? CheckRemoval(store, key, id, named) ?? CheckLife(user, key, kind, ttlMs);
                break;
            case KeyKind.Malformed:
                refusal = $"NOPERM {KeyText(key)} is not a key this system writes (segments are hcd:s:ID, manifests hcd:m:ID with a {SegmentId.HexLength}-digit id, pointers hcd:latest:owner/name, job references {CacheKeys.JobsPrefix}{{VERSION}}:ACCOUNT:JOB, staging leases {CacheKeys.StagingPrefix}ACCOUNT:ID)";
                break;
            default:
                refusal = $"NOPERM User {user.Name} has no permissions to write {KeyText(key)}: that takes the admin role";
                break;
        }
        return refusal is null ? WriteVerdict.Allowed : WriteVerdict.Refused;
    }

    /// <summary>
    /// EXPIRE, PEXPIRE (<paramref name="newTtlMs"/>) or PERSIST (null) by a writer: shared keys only gain life, a
    /// pointer changes only for its owner, bookkeeping only for its account and within its longest life.
    /// <paramref name="onlyLonger"/>: the GT option, which cannot shorten a life, so a shared key may take it whatever
    /// its life now (how a stage keeps the segments it found held, some of which another version keeps for ever).
    /// </summary>
    public static string? Expire(CacheStore store, CacheUser user, ReadOnlySpan<byte> key, long? newTtlMs, bool onlyLonger = false)
    {
        var kind = Classify(key, out _, out var name);
        switch (kind)
        {
            case KeyKind.Foreign:
                return null;
            case KeyKind.Latest:
                return CheckOwner(user, name!);
            case KeyKind.Segment:
            case KeyKind.Manifest:
                long current = store.GetTimeToLiveMs(key);
                if (current == -2 || newTtlMs is null || onlyLonger || (current >= 0 && newTtlMs > current)) return null;
                return $"NOPERM User {user.Name} may only lengthen the life of {KeyText(key)}: segments and manifests are shared by every dataset holding the same bytes";
            case KeyKind.JobReference:
            case KeyKind.Staging:
                return CheckAccount(user, key, name!) ?? CheckLife(user, key, kind, newTtlMs ?? 0);
            case KeyKind.Lock:
                return CheckHolder(store, user, key)
                       ?? $"NOPERM {KeyText(key)} is never renewed: a writer's lock lives at most {MaxLockMs / 1000} s from when it was taken with SET NX";
            case KeyKind.Removed:
                return CheckRecordOwner(store, user, key) ?? CheckLife(user, key, kind, newTtlMs ?? 0);
            default:
                return $"NOPERM User {user.Name} has no permissions to change {KeyText(key)}: that takes the admin role";
        }
    }

    /// <summary>
    /// <c>DEL key</c> by a writer: its own bookkeeping, and the pointer and manifests of datasets it owns (a job's end
    /// step removes its version). Segments are shared across owners, so only an administrator's collection frees them.
    /// </summary>
    public static string? Delete(CacheStore store, CacheUser user, ReadOnlySpan<byte> key)
    {
        switch (Classify(key, out var id, out var name))
        {
            case KeyKind.Foreign:
                return null;
            case KeyKind.Latest:
                return CheckOwner(user, name!);
            case KeyKind.Manifest:
                if (!store.TryPeek(key, out var stored)) return null;
                return Decode(stored, id, out var manifest) is { } problem
                    ? $"NOPERM {KeyText(key)} holds no readable manifest ({problem}): deleting it takes the admin role"
                    : CheckOwner(user, manifest!.Name);
            case KeyKind.JobReference:
            case KeyKind.Staging:
                return CheckAccount(user, key, name!);
            case KeyKind.Lock:
                return CheckHolder(store, user, key);
            case KeyKind.Removed:
                return CheckRecordOwner(store, user, key);
            default:
                return $"NOPERM User {user.Name} has no permissions to delete shared keys (segments, and what this system keeps for itself): that takes the admin role";
        }
    }

    /// <summary>
    /// Keys outside <c>hcd:</c> are no dataset's, so no owner limits them; together they may hold at most the host's
    /// --foreign-key-quota (what a key replaced held is counted back first).
    /// </summary>
    private static string? CheckForeignQuota(CacheStore store, CacheUser user, ReadOnlySpan<byte> key, long valueLength, long quota)
    {
        var replaced = store.TryPeek(key, out var held) ? CacheStore.EstimateCost(key.Length, held.Length) : 0;
        var after = store.ForeignBytes - replaced + CacheStore.EstimateCost(key.Length, valueLength);
        return after <= quota ? null
            : $"NOPERM keys outside hcd: would hold {ByteSize.Format(after)} on this host, over its --foreign-key-quota of {ByteSize.Format(quota)}: " +
              $"User {user.Name} may store no more there (memory is kept for datasets; an administrator is not limited)";
    }

    /// <summary>Whether <paramref name="key"/> is a version's lock (what <see cref="LockLedger"/> accounts for).</summary>
    public static bool IsLock(ReadOnlySpan<byte> key) => key.StartsWith(LockKey);

    /// <summary>The dataset of the version whose lock is <paramref name="lockKey"/>, from the manifest this host holds; null without one.</summary>
    public static string? DatasetOfLock(CacheStore store, ReadOnlySpan<byte> lockKey)
    {
        var hex = lockKey[LockKey.Length..];
        if (!TryId(hex, out var id)) return null;
        Span<byte> manifestKey = stackalloc byte[ManifestKey.Length + hex.Length];
        ManifestKey.CopyTo(manifestKey);
        hex.CopyTo(manifestKey[ManifestKey.Length..]);
        return store.TryPeek(manifestKey, out var stored) && Decode(stored, id, out var manifest) is null ? manifest!.Name : null;
    }

    private static string? CheckOwner(CacheUser user, string name) => user.Owns(name) ? null
        : $"NOPERM dataset {name} is not among the names of account {user.Name} (users file: names {user.Name} ...): User {user.Name} may read it but not change it";

    private static string? CheckAccount(CacheUser user, ReadOnlySpan<byte> key, string account) => account == user.Name ? null
        : $"NOPERM {KeyText(key)} belongs to account {account}: only it or an administrator changes it";

    private static bool Holds(CacheUser user, in ReadOnlySequence<byte> value)
    {
        if (value.Length <= user.NameBytes.Length) return false;
        Span<byte> head = stackalloc byte[Math.Min(65, (int)value.Length)];
        value.Slice(0, head.Length).CopyTo(head);
        return head.StartsWith(user.NameBytes) && head[user.NameBytes.Length] == (byte)':';
    }

    private static string? CheckHolder(CacheStore store, CacheUser user, ReadOnlySpan<byte> key)
    {
        if (!store.TryPeek(key, out var value) || Holds(user, new ReadOnlySequence<byte>(value))) return null;
        var holder = Encoding.UTF8.GetString(value.AsSpan(0, Math.Max(0, value.AsSpan().IndexOf((byte)':'))));
        return $"NOPERM {KeyText(key)} is held by account {holder}: only it or an administrator releases it";
    }

    /// <summary>
    /// A removal record belongs to its version's owner: it must name the dataset of the manifest this host holds for
    /// the version, and a record already here is replaced only by one naming the same dataset (a record naming another
    /// dataset than the manifest's is a squatter's, and gives way). Without that, any writer could overwrite the
    /// owner's record with one naming a dataset of its own, then delete it, and nodes would serve the removed
    /// version again. A host without the manifest (restarted empty, newly added) cannot tell whose version it is, so
    /// it takes no new record until it has one: a record it took on trust would keep the owner's own removal out. The
    /// owner, who may store the manifest, puts it here first (<see cref="CacheKeys.RemovalOwnerUnknown"/>).
    /// </summary>
    private static string? CheckRemoval(CacheStore store, ReadOnlySpan<byte> key, SegmentId version, string named)
    {
        string? datasetOfVersion = null;
        if (store.TryPeek(Encoding.ASCII.GetBytes(CacheKeys.Manifest(version.ToString())), out var manifest) && Decode(manifest, version, out var parsed) is null)
            datasetOfVersion = parsed!.Name;
        if (datasetOfVersion is not null && datasetOfVersion != named)
            return $"NOPERM version {version} is of dataset {datasetOfVersion}, not {named}: a removal record names its version's dataset";
        if (!store.TryPeek(key, out var held))
            return datasetOfVersion is not null ? null
                : $"NOPERM {CacheKeys.RemovalOwnerUnknown} {version}: this host holds no manifest hcd:m:{version}; its owner stores the manifest here first, then the record";
        var recorded = Encoding.UTF8.GetString(held);
        if (recorded == named || (datasetOfVersion is not null && recorded != datasetOfVersion)) return null;
        // Without the manifest the record here may be a squatter's as well as the owner's: the owner settles it by
        // storing the manifest, which no one else can.
        return $"NOPERM {KeyText(key)} records the removal of {recorded}: only its owner or an administrator changes it" +
               (datasetOfVersion is null ? $" ({CacheKeys.RemovalOwnerUnknown} {version} without its manifest hcd:m:{version}; the owner stores the manifest here first)" : "");
    }

    private static string? CheckRecordOwner(CacheStore store, CacheUser user, ReadOnlySpan<byte> key)
    {
        if (!store.TryPeek(key, out var value)) return null;
        return CheckOwner(user, Encoding.UTF8.GetString(value));
    }

    private static string? CheckLife(CacheUser user, ReadOnlySpan<byte> key, KeyKind kind, long ttlMs)
    {
        long most = kind switch { KeyKind.Lock => MaxLockMs, KeyKind.Staging => MaxLeaseMs, _ => MaxRecordMs };
        return ttlMs > 0 && ttlMs <= most ? null
            : $"NOPERM {KeyText(key)} must expire within {most / 1000} s (EX or PX): User {user.Name}'s bookkeeping never outlives it";
    }

    /// <summary>A latest pointer names a version whose manifest this host holds, and that manifest is of this dataset.</summary>
    private static string? CheckPointer(CacheStore store, string name, in ReadOnlySequence<byte> value)
    {
        var version = Encoding.ASCII.GetString(value.Length <= 64 ? value.ToArray() : []);
        if (!SegmentId.TryParse(version, out var id))
            return $"NOPERM the latest pointer of {name} must be a version id";
        if (!store.TryPeek(Encoding.ASCII.GetBytes(CacheKeys.Manifest(version)), out var stored))
            return $"NOPERM the latest pointer of {name} must name a version whose manifest this host holds; it has no hcd:m:{version}";
        var problem = Decode(stored, id, out var manifest);
        if (problem is not null) return $"NOPERM the manifest of version {version} is unreadable: {problem}";
        return manifest!.Name == name ? null : $"NOPERM version {version} is of dataset {manifest.Name}, not {name}";
    }

    /// <summary>A new segment or manifest: its bytes must decode to the id its key names; a manifest's dataset must be one the writer owns.</summary>
    private static string? CheckContent(CacheUser user, ReadOnlySpan<byte> key, SegmentId id, in ReadOnlySequence<byte> value)
    {
        byte[]? copy = null;
        try
        {
            ReadOnlySpan<byte> stored;
            if (value.IsSingleSegment) stored = value.FirstSpan;
            else
            {
                copy = ArrayPool<byte>.Shared.Rent((int)value.Length);
                value.CopyTo(copy);
                stored = copy.AsSpan(0, (int)value.Length);
            }
            bool isManifest = key.StartsWith(ManifestKey);
            if (!isManifest)
            {
                var problem = Verify(stored, id);
                return problem is null ? null : $"NOPERM the value is not segment {id}: {problem}";
            }
            var manifestProblem = Decode(stored, id, out var manifest);
            if (manifestProblem is not null) return $"NOPERM the value is not manifest {id}: {manifestProblem}";
            return CheckOwner(user, manifest!.Name);
        }
        finally
        {
            if (copy is not null) ArrayPool<byte>.Shared.Return(copy);
        }
    }

    private static string? Verify(ReadOnlySpan<byte> stored, SegmentId id)
    {
        if (!SegmentCodec.TryReadRawLength(stored, out var rawLength)) return "not a stored segment";
        var raw = ArrayPool<byte>.Shared.Rent(Math.Max(1, rawLength));
        try
        {
            return SegmentCodec.TryDecodeStrict(stored, id, raw.AsSpan(0, rawLength));
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(raw);
        }
    }

    internal static string? Decode(ReadOnlySpan<byte> stored, SegmentId id, out Manifest? manifest)
    {
        manifest = null;
        if (!SegmentCodec.TryReadRawLength(stored, out var rawLength)) return "not a stored segment";
        var raw = ArrayPool<byte>.Shared.Rent(Math.Max(1, rawLength));
        try
        {
            var problem = SegmentCodec.TryDecodeStrict(stored, id, raw.AsSpan(0, rawLength));
            if (problem is not null) return problem;
            manifest = Manifest.Parse(raw.AsSpan(0, rawLength));
            return null;
        }
        catch (InvalidDataException e)
        {
            return e.Message;
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(raw);
        }
    }

    /// <summary>The NX and EX/PX options of a SET from argument <paramref name="from"/> on; malformed ones are the handler's to refuse.</summary>
    public static void ReadOptions(RespCommand args, int from, out long ttlMs, out bool onlyIfAbsent)
    {
        ttlMs = 0;
        onlyIfAbsent = false;
        for (int i = from; i < args.Count; i++)
        {
            var option = args.Span(i);
            if (Ascii.EqualsIgnoreCase(option, "NX"u8)) onlyIfAbsent = true;
            else if ((Ascii.EqualsIgnoreCase(option, "EX"u8) || Ascii.EqualsIgnoreCase(option, "PX"u8)) && i + 1 < args.Count
                && RespParser.TryParseInt64(args.Span(i + 1), out long amount) && amount > 0 && amount < long.MaxValue / 1000)
            {
                ttlMs = option[0] is (byte)'E' or (byte)'e' ? amount * 1000 : amount;
                i++;
            }
        }
    }

    private static bool SequenceEquals(in ReadOnlySequence<byte> value, byte[] held)
    {
        if (value.IsSingleSegment) return value.FirstSpan.SequenceEqual(held);
        int offset = 0;
        foreach (var piece in value)
        {
            if (!piece.Span.SequenceEqual(held.AsSpan(offset, piece.Length))) return false;
            offset += piece.Length;
        }
        return true;
    }

    private static string KeyText(ReadOnlySpan<byte> key) => Encoding.UTF8.GetString(Commands.Replies.Sanitize(key));
}
