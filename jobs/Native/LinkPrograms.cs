using System.Runtime.CompilerServices;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Commands;

namespace Hpc.Jobs.Native;

// Compiled only into the native build (Hpc.Jobs.csproj, PublishAot), which references the three programs' assemblies.
internal static class LinkPrograms
{
    [ModuleInitializer]
    internal static void Register()
    {
        LinkedPrograms.Add(CacheHostOptions.Assembly, Hpc.CacheHost.CacheHostProgram.RunAsync);
        LinkedPrograms.Add(NodeAgentOptions.Assembly, Hpc.NodeAgent.NodeAgentProgram.RunAsync);
        LinkedPrograms.Add(StagerOptions.Assembly, Hpc.Stager.StagerProgram.RunAsync);
    }
}
