package local.router.registry;

import java.util.List;

import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;

/**
 * The bean Apicurio's config-index build step makes (the list of settings that may be changed at
 * run time through the admin API). That step's artifact is not on Maven Central, so the list is
 * empty here: every setting is read from application.properties and the environment only.
 */
public class DynamicConfigProperties {

    @Produces
    @Singleton
    DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
