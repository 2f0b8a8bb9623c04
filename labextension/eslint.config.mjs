// ESLint (flat config) for the extension's TypeScript and the JupyterHub console's plain script.
//
// `npm run eslint:check` / `npm run eslint` run ESLint from the repository root with this file as
// `-c`, because ESLint ignores files outside the directory it resolves patterns from and the
// console lives in ../jupyter_gpu/hub/static. So every pattern is given twice: relative to the root
// (the scripts) and relative to this directory (`npx eslint src` here, editors).
// Formatting is prettier's job (`.prettierrc`): no stylistic rules here.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

const here = patterns => patterns.flatMap(p => [p, `labextension/${p}`]);

export default tseslint.config(
  { ignores: here(['lib/']) },
  {
    files: here(['src/**/*.ts']),
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: { globals: globals.browser },
    rules: {
      // The jupyterlab/extension-template's conventions: interfaces named I*, braces and === always.
      '@typescript-eslint/naming-convention': [
        'error',
        { selector: 'interface', format: ['PascalCase'], custom: { regex: '^I[A-Z]', match: true } }
      ],
      // JupyterLab's convention: `namespace Foo { export interface IOptions }` beside `class Foo`.
      '@typescript-eslint/no-namespace': 'off',
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error'
    }
  },
  {
    files: here(['src/__tests__/**/*.ts']),
    languageOptions: { globals: globals.node }
  },
  {
    // The hub console: one classic <script> (no modules, no build step) the browser runs as is.
    files: ['jupyter_gpu/hub/static/*.js', '../jupyter_gpu/hub/static/*.js'],
    extends: [js.configs.recommended],
    languageOptions: { sourceType: 'script', ecmaVersion: 2020, globals: globals.browser }
  },
  {
    // Build and tool configuration run by node.
    files: here(['*.js', '*.mjs']),
    extends: [js.configs.recommended],
    languageOptions: { globals: globals.node }
  }
);
