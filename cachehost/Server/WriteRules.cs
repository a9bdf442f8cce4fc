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
/// only administrators). A dataset name belongs to the account that first stored its manifest or latest pointer (an
/// <c>hcd:owner:</c> record the host keeps); other writers may read it but not change its pointer. Segments and
/// manifests are content-addressed and shared by every dataset holding the same bytes, so a writer may add them only
/// with the bytes their id names, never replace them, and only lengthen their life. Keys outside <c>hcd:</c> are not
/// this system's and are left to the role check alone.
/// </summary>
internal static class WriteRules
{
    private enum KeyKind { Foreign, Segment, Manifest, Latest, Bookkeeping, HostOnly, Malformed }

    private static readonly byte[] Prefix = "hcd:"u8.ToArray();
    private static readonly byte[] Segment = Encoding.ASCII.GetBytes(CacheKeys.SegmentPrefix);
    private static readonly byte[] ManifestKey = Encoding.ASCII.GetBytes(CacheKeys.ManifestPrefix);
    private static readonly byte[] Latest = Encoding.ASCII.GetBytes(CacheKeys.LatestPrefix);

    private static KeyKind Classify(ReadOnlySpan<byte> key, out SegmentId id, out string? name)
    {
        id = default;
        name = null;
        if (!key.StartsWith(Prefix)) return KeyKind.Foreign;
        if (CommandWriterDeletes(key)) return KeyKind.Bookkeeping;
        if (key.StartsWith(Segment) || key.StartsWith(ManifestKey))
        {
            var kind = key.StartsWith(Segment) ? KeyKind.Segment : KeyKind.Manifest;
            var hex = key[(kind == KeyKind.Segment ? Segment.Length : ManifestKey.Length)..];
            return hex.Length == SegmentId.HexLength && SegmentId.TryParse(Encoding.ASCII.GetString(hex), out id) ? kind : KeyKind.Malformed;
        }
        if (key.StartsWith(Latest))
        {
            name = Encoding.UTF8.GetString(key[Latest.Length..]);
            return DatasetName.TryValidate(name, out _) ? KeyKind.Latest : KeyKind.Malformed;
        }
        // The collection flag, ownership records and anything not yet defined: administrators only.
        return KeyKind.HostOnly;
    }

    private static bool CommandWriterDeletes(ReadOnlySpan<byte> key) => Commands.CommandInfo.WriterMayDelete(key);

    /// <summary>
    /// <c>SET key value</c> by a writer (<paramref name="onlyIfAbsent"/>: with NX). <paramref name="claim"/> false
    /// (ACL DRYRUN) decides without recording ownership. <see cref="WriteVerdict.AlreadyHeld"/>: the key holds these very
    /// bytes already.
    /// </summary>
    public static WriteVerdict Set(CacheStore store, CacheUser user, ReadOnlySpan<byte> key, in ReadOnlySequence<byte> value,
        bool onlyIfAbsent, bool claim, out string? refusal)
    {
        refusal = null;
        switch (Classify(key, out var id, out var name))
        {
            case KeyKind.Foreign:
            case KeyKind.Bookkeeping:
                return WriteVerdict.Allowed;
            case KeyKind.Latest:
                refusal = CheckOwner(store, user, name!, claim) ?? CheckPointer(store, name!, value);
                return refusal is null ? WriteVerdict.Allowed : WriteVerdict.Refused;
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
                refusal = CheckContent(store, user, key, id, value, claim);
                return refusal is null ? WriteVerdict.Allowed : WriteVerdict.Refused;
            case KeyKind.Malformed:
                refusal = $"NOPERM {KeyText(key)} is not a key this system writes (segments are hcd:s:ID, manifests hcd:m:ID with a {SegmentId.HexLength}-digit id, pointers hcd:latest:owner/name)";
                return WriteVerdict.Refused;
            default:
                refusal = $"NOPERM User {user.Name} has no permissions to write {KeyText(key)}: that takes the admin role";
                return WriteVerdict.Refused;
        }
    }

    /// <summary>
    /// EXPIRE, PEXPIRE (<paramref name="newTtlMs"/>) or PERSIST (null) by a writer: shared keys only gain life, a
    /// pointer changes only for its owner.
    /// </summary>
    public static string? Expire(CacheStore store, CacheUser user, ReadOnlySpan<byte> key, long? newTtlMs)
    {
        switch (Classify(key, out _, out var name))
        {
            case KeyKind.Foreign:
            case KeyKind.Bookkeeping:
                return null;
            case KeyKind.Latest:
                return CheckOwner(store, user, name!, claim: false);
            case KeyKind.Segment:
            case KeyKind.Manifest:
                long current = store.GetTimeToLiveMs(key);
                if (current == -2 || newTtlMs is null || (current >= 0 && newTtlMs > current)) return null;
                return $"NOPERM User {user.Name} may only lengthen the life of {KeyText(key)}: segments and manifests are shared by every dataset holding the same bytes";
            default:
                return $"NOPERM User {user.Name} has no permissions to change {KeyText(key)}: that takes the admin role";
        }
    }

    /// <summary>The account a dataset name belongs to on this host, or null when nobody has staged it here.</summary>
    public static string? OwnerOf(CacheStore store, string name) =>
        store.TryPeek(Encoding.UTF8.GetBytes(CacheKeys.Owner(name)), out var owner) ? Encoding.UTF8.GetString(owner) : null;

    /// <summary>The dataset names recorded as belonging to <paramref name="account"/>.</summary>
    public static List<string> NamesOwnedBy(CacheStore store, string account)
    {
        var names = new List<string>();
        var prefix = Encoding.ASCII.GetBytes(CacheKeys.OwnerPrefix);
        foreach (var key in store.KeysWithPrefix(prefix))
            if (store.TryPeek(key, out var owner) && Encoding.UTF8.GetString(owner) == account)
                names.Add(Encoding.UTF8.GetString(key.AsSpan(prefix.Length)));
        names.Sort(StringComparer.Ordinal);
        return names;
    }

    private static string? CheckOwner(CacheStore store, CacheUser user, string name, bool claim)
    {
        var ownerKey = Encoding.UTF8.GetBytes(CacheKeys.Owner(name));
        if (!store.TryPeek(ownerKey, out var owner))
        {
            if (!claim) return null;
            // First writer wins; two claiming at once both read back whichever record landed.
            store.Set(ownerKey, user.NameBytes, SetCondition.IfNotExists);
            if (!store.TryPeek(ownerKey, out owner)) return $"OOM cannot record the owner of dataset {name}";
        }
        if (owner.AsSpan().SequenceEqual(user.NameBytes)) return null;
        return $"NOPERM dataset {name} belongs to account {Encoding.UTF8.GetString(owner)}: User {user.Name} may read it but not change it";
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

    /// <summary>A new segment or manifest: its bytes must decode to the id its key names; a manifest's dataset must be the writer's.</summary>
    private static string? CheckContent(CacheStore store, CacheUser user, ReadOnlySpan<byte> key, SegmentId id, in ReadOnlySequence<byte> value, bool claim)
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
            return CheckOwner(store, user, manifest!.Name, claim);
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

    private static string? Decode(ReadOnlySpan<byte> stored, SegmentId id, out Manifest? manifest)
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
