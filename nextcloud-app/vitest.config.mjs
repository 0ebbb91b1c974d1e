/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Unit tests of the stores and API wrappers (tests/js). They talk to real HTTP and
 * WebSocket servers on 127.0.0.1 started by the tests, through jsdom's XHR and WebSocket.
 */
import vue from '@vitejs/plugin-vue'
import { defineConfig } from 'vitest/config'

export default defineConfig({
	plugins: [vue()],
	test: {
		environment: 'jsdom',
		include: ['tests/js/**/*.test.js'],
		setupFiles: ['tests/js/setup.js'],
		testTimeout: 30000,
	},
})
