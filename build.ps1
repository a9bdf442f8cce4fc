#!/usr/bin/env pwsh
# Restore, build, test and pack. Usage: ./build.ps1 [-Configuration Release] [-SkipTests]
param(
    [string]$Configuration = "Release",
    [switch]$SkipTests,
    # hpcdata (with the cache host, node agent and stager in it) and the sample worker compiled to native code (needs clang on Linux, the MSVC
    # build tools on Windows): no runtime start-up and no JIT (docs/benchmarks.md has what it changes).
    [switch]$Native
)
$ErrorActionPreference = "Stop"
Set-Location $PSScriptRoot

function Invoke-Step([string]$Name, [scriptblock]$Command) {
    Write-Host "==> $Name"
    & $Command
    if ($LASTEXITCODE -ne 0) { throw "$Name failed with exit code $LASTEXITCODE" }
}

Invoke-Step "restore" { dotnet restore Hpc.sln }
Invoke-Step "build"   { dotnet build Hpc.sln -c $Configuration --no-restore }
if (-not $SkipTests) {
    Invoke-Step "test" { dotnet test Hpc.sln -c $Configuration --no-build }
}
# The SDK packages (with .snupkg symbols) and the hpcdata tool, which carries every program (docs/deploy.md).
foreach ($package in "sdk/Core/Hpc.CommonData.Core.csproj", "sdk/Worker/Hpc.CommonData.csproj", "jobs/Hpc.Jobs.csproj") {
    Invoke-Step "pack $package" { dotnet pack $package -c $Configuration --no-build -o artifacts/packages }
}
# One folder with every program, precompiled (ReadyToRun): a worker's first open then costs far less JIT time.
$rid = if ($IsWindows -or $env:OS -eq "Windows_NT") { "win-x64" } else { "linux-x64" }
# The lab and the samples go in the same folder, so `hpcdata bench` and `hpcdata demo` find them beside hpcdata.
foreach ($project in "jobs/Hpc.Jobs.csproj", "cachehost/Hpc.CacheHost.csproj", "nodeagent/Hpc.NodeAgent.csproj", "stager/Hpc.Stager.csproj",
                     "bench/Hpc.Bench.csproj", "samples/Hpc.Samples.csproj") {
    Invoke-Step "publish $project" { dotnet publish $project -c $Configuration -r $rid --self-contained false -p:PublishReadyToRun=true -o artifacts/publish/hpcdata }
}
if ($Native) {
    # hpcdata compiled to native code, with the cache host, node agent and stager in it, where an installed tool keeps
    # it (native/<rid>/): the hpcdata of this folder starts it for every program it carries.
    Invoke-Step "publish jobs/Hpc.Jobs.csproj (native)" { dotnet publish jobs/Hpc.Jobs.csproj -c $Configuration -r $rid -p:PublishAot=true -p:NativePrograms=false -o artifacts/publish/hpcdata/native/$rid }
    Invoke-Step "publish samples/native/Hpc.Samples.Native.csproj (native)" { dotnet publish samples/native/Hpc.Samples.Native.csproj -c $Configuration -r $rid -p:PublishAot=true -o artifacts/publish/hpcdata }
    # hpcdata finds a program beside itself: the native one only when no assembly and runtime configuration of it are left there.
    Remove-Item -ErrorAction SilentlyContinue artifacts/publish/hpcdata/Hpc.Samples.Native.dll, artifacts/publish/hpcdata/Hpc.Samples.Native.runtimeconfig.json,
        artifacts/publish/hpcdata/Hpc.Samples.Native.deps.json
}
Write-Host "done: packages in artifacts/packages, programs in artifacts/publish/hpcdata"
