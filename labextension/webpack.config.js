// Merged by @jupyter/builder into its Rspack configuration (package.json: jupyterlab.webpackConfig).
//
// Reproducible bundles: the same sources give byte-identical static files wherever they are built
// (a checkout, an unpacked sdist, a CI runner). The default numeric module ids are hashes that
// include the build directory for some modules (the shared-module consumers), so the wheel built
// from an sdist got a different remoteEntry.<hash>.js than the sdist's own build. Ids named after
// the module's path relative to this directory do not depend on where the directory is.
module.exports = {
  context: __dirname,
  optimization: {
    moduleIds: 'named',
    chunkIds: 'named'
  }
};
