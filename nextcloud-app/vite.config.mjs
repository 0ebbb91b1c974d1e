/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Builds the settings pages into js/ at the repository root. Run from the repository
 * root (`make js`): @nextcloud/vite-config writes js/ relative to the working directory
 * and reads the app id from appinfo/info.xml there.
 */
import { createAppConfig } from '@nextcloud/vite-config'
import { fileURLToPath } from 'node:url'

const here = fileURLToPath(new URL('.', import.meta.url))
const src = (name) => fileURLToPath(new URL(`./src/${name}`, import.meta.url))

export default createAppConfig({
	'personal-settings': src('personal-settings.js'),
	'admin-settings': src('admin-settings.js'),
}, {
	// The styles travel inside the two entry files: the templates load only
	// istota-personal-settings / istota-admin-settings and the release tarball has no css/.
	inlineCSS: { relativeCSSInjection: true },
	// REUSE .license files next to every chunk would double js/ for no reader.
	extractLicenseInformation: false,
	thirdPartyLicense: false,
	config: {
		// Vite resolves deduplicated packages (vue) from its root: that must be where
		// node_modules is. The output still goes to the repository root (js/).
		root: here,
		build: {
			outDir: fileURLToPath(new URL('..', import.meta.url)),
			// Source maps would ship the whole dependency tree in the tarball.
			sourcemap: false,
		},
	},
})
