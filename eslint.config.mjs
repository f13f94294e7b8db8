// ESLint (npm run lint; CI): typescript-eslint's recommended rules over the TypeScript and JavaScript the
// repository holds. Rules turned off say why.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    // Generated or third-party: compiled output, native builds, the API reference, fuzzing corpora.
    ignores: ['dist/', 'build/', 'build-*/', 'prebuilds/', 'node_modules/', 'docs/api/', 'scratch/', 'out/', 'test/fuzz/corpus/'],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // Unused names are already errors in tsc (noUnusedLocals); parameters named `_x` are kept on purpose.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    // Benches and tests read what worker processes and threads post back, which arrives untyped (the
    // library itself keeps the rule).
    files: ['bench/**/*.ts', 'test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // CommonJS files (worker processes forked by path, test children): require() is how they load, and a
    // module's own `const crypto = require('node:crypto')` shadows the global only in its module scope.
    files: ['**/*.cjs', 'test/**/*.js'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off', 'no-redeclare': ['error', { builtinGlobals: false }] },
  },
);
