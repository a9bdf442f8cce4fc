using Hpc.Fuzzing;

namespace Hpc.CacheHost.Tests;

/// <summary>
/// The fuzz corpus kept in the repository (tests/Hpc.Fuzz/corpus: the seeds and whatever coverage-guided runs added) is
/// read by every target as the product reads it: parsed, waiting for more, or refused, never an unexpected exception.
/// </summary>
public sealed class FuzzCorpusTests
{
    public static TheoryData<string> Targets => [.. FuzzTargets.All.Keys];

    [Theory]
    [MemberData(nameof(Targets))]
    public void Every_input_of_the_corpus_is_handled_by_its_target(string target)
    {
        var dir = Path.Combine(AppContext.BaseDirectory, "corpus", target);
        var inputs = Directory.GetFiles(dir);
        Assert.True(inputs.Length >= Seeds.For(target).Count, $"{dir} holds {inputs.Length} inputs");
        foreach (var input in inputs)
        {
            var e = Record.Exception(() => FuzzTargets.All[target](File.ReadAllBytes(input)));
            Assert.True(e is null, $"{target} {Path.GetFileName(input)}: {e}");
        }
    }

    [Theory]
    [MemberData(nameof(Targets))]
    public void The_seeds_in_the_repository_are_what_the_writers_make_now(string target)
    {
        foreach (var (name, bytes) in Seeds.For(target))
            Assert.Equal(bytes, File.ReadAllBytes(Path.Combine(AppContext.BaseDirectory, "corpus", target, name)));
    }
}
