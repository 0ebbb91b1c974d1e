<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\Migration;

abstract class SimpleMigrationStep implements IMigrationStep {
	public function name(): string {
		return '';
	}

	public function description(): string {
		return '';
	}

	public function preSchemaChange(IOutput $output, \Closure $schemaClosure, array $options) {
	}

	public function changeSchema(IOutput $output, \Closure $schemaClosure, array $options) {
		return null;
	}

	public function postSchemaChange(IOutput $output, \Closure $schemaClosure, array $options) {
	}
}
