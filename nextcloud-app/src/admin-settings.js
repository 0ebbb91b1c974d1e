/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Entry of js/istota-admin-settings.mjs, loaded by the admin settings template.
 */
import { createApp } from 'vue'
import AdminSettings from './views/AdminSettings.vue'
import './styles.css'

const el = document.getElementById('istota-admin-settings')
if (el) {
	createApp(AdminSettings).mount(el)
}
