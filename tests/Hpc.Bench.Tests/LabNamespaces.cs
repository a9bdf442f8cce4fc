namespace Hpc.Bench.Tests;

/// <summary>
/// Tests that build the lab's network namespaces run one at a time: each takes the first free instance number, and
/// two classes asking at once would both get the same one before either had made its namespaces.
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class LabNamespaces
{
    public const string Name = "lab network namespaces";
}
