<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\AppFramework\Http\Attribute;

use Attribute;

#[Attribute(Attribute::TARGET_METHOD | Attribute::IS_REPEATABLE)]
class Route {
	public const TYPE_API = 'ocs';
	public const TYPE_FRONTPAGE = 'routes';

	public function __construct(
		protected string $type,
		protected string $verb,
		protected string $url,
		protected ?array $requirements = null,
		protected ?array $defaults = null,
		protected ?string $root = null,
		protected ?string $postfix = null,
	) {
	}

	public function toArray() {
		$route = ['verb' => $this->verb, 'url' => $this->url];
		if ($this->requirements !== null) {
			$route['requirements'] = $this->requirements;
		}
		if ($this->defaults !== null) {
			$route['defaults'] = $this->defaults;
		}
		if ($this->root !== null) {
			$route['root'] = $this->root;
		}
		if ($this->postfix !== null) {
			$route['postfix'] = $this->postfix;
		}
		return $route;
	}

	public function getType(): string {
		return $this->type;
	}

	public function getVerb(): string {
		return $this->verb;
	}

	public function getUrl(): string {
		return $this->url;
	}

	public function getRequirements(): ?array {
		return $this->requirements;
	}

	public function getDefaults(): ?array {
		return $this->defaults;
	}

	public function getRoot(): ?string {
		return $this->root;
	}

	public function getPostfix(): ?string {
		return $this->postfix;
	}
}
