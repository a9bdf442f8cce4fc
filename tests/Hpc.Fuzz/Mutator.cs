using System.Text;

namespace Hpc.Fuzzing;

/// <summary>
/// A seeded mutation fuzzer: valid inputs bent by bit flips, protocol-significant bytes, inserted, deleted, repeated
/// and truncated runs, and huge numbers in place of digits. Deterministic for a seed, so a failure names the input that
/// caused it and reproduces. Iterations per target: <c>HPCDATA_FUZZ_ITERATIONS</c> (default a bounded CI run).
/// </summary>
public static class Mutator
{
    public const int DefaultIterations = 20_000;

    public static int Iterations =>
        int.TryParse(Environment.GetEnvironmentVariable("HPCDATA_FUZZ_ITERATIONS"), out var n) && n > 0 ? n : DefaultIterations;

    private static readonly byte[] Interesting = [.. "\r\n$*:+-0123456789{}[]\","u8, 0x00, 0x7F, 0x80, 0xFF];
    private static readonly byte[][] BigNumbers = [.. new[] { "-1", "0", "2147483647", "2147483648", "-2147483649", "99999999999999999999", "9223372036854775807" }.Select(Encoding.ASCII.GetBytes)];

    public static byte[] Mutate(Random rng, byte[] seed, int maxLength = 1 << 20)
    {
        var data = new List<byte>(seed);
        for (var k = 1 + rng.Next(4); k > 0; k--)
        {
            var at = data.Count == 0 ? 0 : rng.Next(data.Count);
            switch (rng.Next(7))
            {
                case 0 when data.Count > 0: data[at] ^= (byte)(1 << rng.Next(8)); break;
                case 1 when data.Count > 0: data[at] = Interesting[rng.Next(Interesting.Length)]; break;
                case 2: data.InsertRange(at, Enumerable.Range(0, 1 + rng.Next(8)).Select(_ => (byte)rng.Next(256))); break;
                case 3 when data.Count > 0: data.RemoveRange(at, Math.Min(data.Count - at, 1 + rng.Next(16))); break;
                case 4 when data.Count > 0: data.InsertRange(at, data.GetRange(at, Math.Min(data.Count - at, 1 + rng.Next(64)))); break;
                case 5: data.RemoveRange(at, data.Count - at); break;
                case 6:
                    var digits = at;
                    while (digits < data.Count && data[digits] is >= (byte)'0' and <= (byte)'9') digits++;
                    data.RemoveRange(at, digits - at);
                    data.InsertRange(at, BigNumbers[rng.Next(BigNumbers.Length)]);
                    break;
            }
        }
        if (data.Count > maxLength) data.RemoveRange(maxLength, data.Count - maxLength);
        return [.. data];
    }

    /// <summary>
    /// Runs <paramref name="target"/> on mutations of the seeds; the target throws only for a defect (an outcome the
    /// parser does not allow). Fails with the first defect's input (base64) and exception, or when the run passes
    /// <paramref name="limit"/> (a hang). Returns how many inputs ran.
    /// </summary>
    public static async Task<int> RunAsync(string name, IReadOnlyList<byte[]> seeds, Action<byte[]> target, int seed = 1, TimeSpan? limit = null)
    {
        var iterations = Iterations;
        var run = Task.Run(() =>
        {
            var rng = new Random(seed);
            for (var i = 0; i < iterations; i++)
            {
                var input = Mutate(rng, seeds[rng.Next(seeds.Count)]);
                try { target(input); }
                catch (Exception e)
                {
                    throw new InvalidOperationException($"{name}: input {i} (seed {seed}) {Convert.ToBase64String(input)} failed with {e.GetType().Name}: {e.Message}", e);
                }
            }
            return iterations;
        });
        return await run.WaitAsync(limit ?? TimeSpan.FromSeconds(120 + iterations / 1000));
    }
}
