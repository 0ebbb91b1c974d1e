<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface IAppConfig {
	public const VALUE_SENSITIVE = 1;
	public const VALUE_MIXED = 2;
	public const VALUE_STRING = 4;
	public const VALUE_INT = 8;
	public const VALUE_FLOAT = 16;
	public const VALUE_BOOL = 32;
	public const VALUE_ARRAY = 64;

	public function hasKey(string $app, string $key, ?bool $lazy = false): bool;

	public function isSensitive(string $app, string $key, ?bool $lazy = false): bool;

	public function isLazy(string $app, string $key): bool;

	public function getValueString(string $app, string $key, string $default = '', bool $lazy = false): string;

	public function getValueInt(string $app, string $key, int $default = 0, bool $lazy = false): int;

	public function getValueArray(string $app, string $key, array $default = [], bool $lazy = false): array;

	public function setValueString(string $app, string $key, string $value, bool $lazy = false, bool $sensitive = false): bool;

	public function setValueInt(string $app, string $key, int $value, bool $lazy = false, bool $sensitive = false): bool;

	public function setValueArray(string $app, string $key, array $value, bool $lazy = false, bool $sensitive = false): bool;

	public function deleteKey(string $app, string $key): void;
}
